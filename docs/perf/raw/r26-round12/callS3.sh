#!/bin/sh
# issue 14 item 4 on the GPU: llama.cpp c2b1518's perplexity (story.txt, -c 128 -b 128, as tests/data/reference)
# and greedy continuations beside llmq's, on the 7B/8B shapes of each architecture, in one call (~7 min).
R=/tmp/resS3; . .gpu-b/commonS.sh
model m7b llama "$S7"; model m8b llama "$S8"; model m7b-qwen2 qwen2 "$S7"; model m7b-phi3 phi3 "$S7"
[ -s /tmp/m8b-llama3.gguf ] || $F/llmq-mkmodel --arch llama3 --vocab tests/data/vocab/ggml-vocab-llama-bpe.gguf --layers 32 $S8 -o /tmp/m8b-llama3.gguf >> $R/mk.log 2>&1
M="m7b m8b m7b-qwen2 m7b-phi3 m8b-llama3"
for m in $M; do timeout 60 $F/llmq-run -m /tmp/$m.gguf --perplexity tests/data/reference/story.txt -c 128 --kv-f16 > $R/ppl-llmq-$m.txt 2>&1; log "llmq ppl $m exit $?"; done
for m in $M; do for p in "Once upon a time" "The capital of France is"; do
  timeout 60 $F/llmq-run -m /tmp/$m.gguf -p "$p" -n 32 --ignore-eos --kv-f16 > "$R/greedy-llmq-$m-${#p}.txt" 2>>$R/log.txt; done; done

L=/tmp/llama/bin
for m in $M; do
  timeout 90 $L/llama-perplexity -m /tmp/$m.gguf -f tests/data/reference/story.txt -c 128 -b 128 -ngl 99 > $R/ppl-llama-$m.txt 2>&1; log "llama ppl $m exit $?"
  for p in "Once upon a time" "The capital of France is"; do
    timeout 60 $L/llama-completion -m /tmp/$m.gguf -p "$p" -n 32 --temp 0 -no-cnv --no-display-prompt --ignore-eos -ngl 99 > "$R/greedy-llama-$m-${#p}.txt" 2>>$R/llama-log.txt; done
done
timeout 200 $P/v1/gpu-parity --models > $R/parity-models-v1.txt 2>&1; log "v1 parity models exit $? $(grep -c " ok" $R/parity-models-v1.txt) ok $(grep -c FAIL $R/parity-models-v1.txt) FAIL"
# issue 14: qwen2's pp512 was 1.7% under the llama shape's in r24 C2, run after it: alternate them (ABAB)
for m in m7b m7b-qwen2 m7b m7b-qwen2; do
  timeout 60 $F/llmq-run -m /tmp/$m.gguf --bench --reps 3 --bench-pp 512 --bench-npl 0 > $R/abab-$m-$(date +%s).md 2>>$R/log.txt; log "abab $m exit $?"; done
tar czf "$OUT/resS3.tgz" -C $R .
for m in $M; do echo "== $m: llmq $(grep -h "^PPL" $R/ppl-llmq-$m.txt) / llama.cpp $(grep -ho 'Final estimate: PPL = [0-9.]*' $R/ppl-llama-$m.txt)"
  for p in 16 24; do cmp -s $R/greedy-llmq-$m-$p.txt $R/greedy-llama-$m-$p.txt && echo "  greedy $p: identical" || echo "  greedy $p: differ"; done; done
for f in $R/abab-*.md; do echo "$f $(grep pp512 $f | head -1)"; done
cat $R/log.txt
