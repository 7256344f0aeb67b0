#!/bin/sh
# test-cli-tokenize: llmq-run --tokenize/--detokenize, as a user runs them.
#
# Pins: the ids llama.cpp recorded (reference prompt_tokens, vocab test
# vectors) come out space-separated on one line; BOS follows the model and
# --no-bos; special tokens in the text are parsed unless --no-parse-special;
# -f reads text with newlines as it is; a vocabulary-only file is enough;
# --detokenize gives the text back; --help, bad flags and missing files give
# the documented exit status (0, 2, 1) and say what is wrong.

if [ -z "$LLMQ_TEST_DATA" ] || [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_TEST_DATA, LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
. "$LLMQ_SRCDIR/tests/unit/check.sh"

RUN="$LLMQ_BUILDDIR/tools/llmq-run"
STORIES="$LLMQ_TEST_DATA/models/stories260K.gguf"
GPT2="$LLMQ_TEST_DATA/vocab/ggml-vocab-gpt-2.gguf"
TMP=$(mktemp -d) || exit 99
trap 'rm -rf "$TMP"' EXIT

same() { [ "$1" = "$2" ]; }

# The first reference prompt ("Once upon a time") and llama.cpp's ids for it.
line=$(head -n 1 "$LLMQ_TEST_DATA/reference/stories260K.greedy.jsonl")
prompt=$(printf '%s' "$line" | sed 's/^{"prompt":"\([^"]*\)".*/\1/')
want=$(printf '%s' "$line" | sed 's/.*"prompt_tokens":\[\([0-9,]*\)\].*/\1/' | tr ',' ' ')

got=$("$RUN" -m "$STORIES" --tokenize -p "$prompt")
same "$got" "$want"; check $? "tokenize '$prompt' gives llama.cpp's ids with BOS: $got"

got=$("$RUN" -m "$STORIES" --tokenize --no-bos -p "$prompt")
same "$got" "${want#1 }"; check $? "--no-bos leaves BOS out: $got"

got=$("$RUN" -m "$STORIES" --tokenize -p "<s>$prompt")
same "$got" "1 $want"; check $? "'<s>' in the text is BOS by default: $got"

got=$("$RUN" -m "$STORIES" --tokenize --no-parse-special -p "<s>$prompt")
case "$got" in "1 1 "*) r=1 ;; "1 "*) r=0 ;; *) r=1 ;; esac
check $r "--no-parse-special takes '<s>' as text: $got"

printf 'one line\nand another\n' > "$TMP/text"
got_f=$("$RUN" -m "$STORIES" --tokenize -f "$TMP/text")
got_p=$("$RUN" -m "$STORIES" --tokenize -p "$(cat "$TMP/text")
")
same "$got_f" "$got_p"; check $? "-f FILE reads the text as it is, newlines included"

# gpt-2 vocabulary-only file; its test vector 12 is "Hello world".
input=$(awk 'BEGIN { RS = "\n__ggml_vocab_test__\n" } NR == 12 { printf "%s", $0 }' \
    "$LLMQ_TEST_DATA/vocab/ggml-vocab-gpt-2.gguf.inp")
want=$(sed -n 12p "$LLMQ_TEST_DATA/vocab/ggml-vocab-gpt-2.gguf.out" | sed 's/^ *//; s/ *$//')
got=$("$RUN" -m "$GPT2" --tokenize -p "$input")
same "$got" "$want"; check $? "a vocabulary-only GGUF tokenizes '$input': $got"

text=$("$RUN" -m "$GPT2" --detokenize "$got")
same "$text" "$input"; check $? "--detokenize gives the text back: '$text'"

ids=$("$RUN" -m "$STORIES" --tokenize --no-bos -p "$prompt")
text=$("$RUN" -m "$STORIES" --detokenize "[$(echo "$ids" | sed 's/ /, /g')]")
same "$text" "$prompt"; check $? "--detokenize takes a bracketed list and drops the SentencePiece space"

"$RUN" --help > "$TMP/out" 2>&1
r=$?
grep -q -- "--tokenize" "$TMP/out" && grep -q -- "--detokenize" "$TMP/out"
check $((r + $?)) "--help lists the modes and exits 0"

"$RUN" -m "$STORIES" --tokenize --frobnicate -p x > "$TMP/out" 2> "$TMP/err"
r=$?
[ $r -eq 2 ] && grep -q -- "--frobnicate" "$TMP/err" && [ ! -s "$TMP/out" ]
check $? "an unknown flag exits 2 and names the flag ($r: $(head -n 1 "$TMP/err"))"

"$RUN" -m "$STORIES" > /dev/null 2> "$TMP/err"
r=$?
[ $r -eq 2 ] && grep -q "mode" "$TMP/err"
check $? "no mode exits 2 and says so ($r)"

"$RUN" -m "$STORIES" --tokenize > /dev/null 2> "$TMP/err"
[ $? -eq 2 ]; check $? "--tokenize without -p or -f exits 2"

"$RUN" -m "$TMP/no-such-model.gguf" --tokenize -p x > /dev/null 2> "$TMP/err"
r=$?
[ $r -eq 1 ] && grep -q "no-such-model.gguf" "$TMP/err"
check $? "a missing model file exits 1 and names it ($r: $(head -n 1 "$TMP/err"))"

"$RUN" -m "$STORIES" --tokenize -f "$TMP/no-such-text" > /dev/null 2> "$TMP/err"
r=$?
[ $r -eq 1 ] && grep -q "no-such-text" "$TMP/err"
check $? "a missing -f file exits 1 and names it ($r)"

"$RUN" -m "$STORIES" --detokenize "1 99999" > /dev/null 2> "$TMP/err"
r=$?
[ $r -eq 1 ] && grep -q "99999" "$TMP/err"
check $? "--detokenize of an id past the vocabulary exits 1 and names it ($r)"

check_done
