/* client.c: submit a batch to llmq with libllmq and print each result as it
 * completes (docs/CLIENTS.md walks through it).
 *
 *   cc client.c $(pkg-config --cflags --libs llmq) -o client
 *   ./client tcp://127.0.0.1:5555 my-batch "Once upon a time" "The cat sat"
 *
 * stdout: one line per job, "INDEX<TAB>STATE<TAB>GENERATED_TOKENS<TAB>TEXT"
 * (newlines in the text printed as spaces); stderr: the timings.
 * Exit status: 0 every job done, 1 some job failed or did not finish, 2 bad
 * usage, 3 the broker could not be reached or refused the batch. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <llmq.h>

#define WAIT_MS 120000 /* how long to wait for the whole batch */

static void print_line(size_t index, const llmq_result *r)
{
    printf("%zu\t%s\t%" PRIu32 "\t", index, llmq_state_name(r->state), r->gen_tokens);
    const char *text = r->state == LLMQ_STATE_DONE ? r->text : r->error;
    for (const char *p = text ? text : ""; *p; p++)
        putchar(*p == '\n' ? ' ' : *p);
    putchar('\n');
    if (r->state == LLMQ_STATE_DONE)
        fprintf(stderr, "job %" PRIu64 " on %s: %u prompt + %u generated tokens, queued %.0f ms,"
                        " prefill %.0f tok/s, decode %.0f tok/s\n",
                r->id, r->worker, r->prompt_tokens, r->gen_tokens, r->queue_wait_ms,
                r->prefill_tok_s, r->decode_tok_s);
}

/* Submits the prompts as one batch; ids[i] is prompt i's job id. */
static int submit(llmq_client *c, const char *batch, char **prompts, size_t n, uint64_t *ids)
{
    llmq_job *jobs = calloc(n, sizeof *jobs);
    char (*keys)[320] = calloc(n, sizeof *keys);
    llmq_error err;
    int rc = -1;
    if (!jobs || !keys) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        llmq_job_init(&jobs[i]); /* the protocol's defaults: greedy, 256 tokens */
        /* A key per job: resubmitting after a lost reply returns the same jobs. */
        snprintf(keys[i], sizeof keys[i], "%s:%zu", batch, i);
        jobs[i].key = keys[i];
        jobs[i].prompt = prompts[i];
        jobs[i].max_tokens = 32;
    }
    /* Returns once the jobs are durable in the broker's database. */
    if (llmq_submit(c, batch, NULL, jobs, n, ids, NULL, &err) < 0)
        fprintf(stderr, "submit failed (%s): %s\n", llmq_code_name(err.code), err.message);
    else
        rc = 0;
out:
    free(jobs);
    free(keys);
    return rc;
}

/* Prints results as the broker pushes them; returns the jobs not done, or -1. */
static long wait_results(llmq_client *c, const uint64_t *ids, size_t n)
{
    llmq_select sel = {.ids = ids, .n_ids = n};
    llmq_wait *w;
    llmq_error err;
    long not_done = 0;
    if (llmq_wait_begin(c, &sel, WAIT_MS, &w, &err) < 0) {
        fprintf(stderr, "wait failed (%s): %s\n", llmq_code_name(err.code), err.message);
        return -1;
    }
    for (;;) {
        llmq_result r;
        int ev = llmq_wait_next(w, 1000, &r, &err);
        if (ev < 0) {
            fprintf(stderr, "wait failed (%s): %s\n", llmq_code_name(err.code), err.message);
            not_done = -1;
            break;
        }
        if (ev == LLMQ_WAIT_END)
            break;
        if (ev != LLMQ_WAIT_RESULT)
            continue; /* LLMQ_WAIT_IDLE: a second without news */
        size_t i = 0;
        while (i < n && ids[i] != r.id)
            i++;
        print_line(i, &r);
        not_done += r.state != LLMQ_STATE_DONE;
    }
    size_t pending = 0;
    bool timed_out = false;
    if (not_done >= 0)
        llmq_wait_summary(w, NULL, &pending, &timed_out);
    if (pending)
        fprintf(stderr, "%zu jobs unfinished%s\n", pending, timed_out ? " (timed out)" : "");
    llmq_wait_free(w);
    return not_done < 0 ? -1 : not_done + (long)pending;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s ENDPOINT BATCH PROMPT...\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)argc - 3;
    llmq_client *c;
    llmq_error err;
    if (llmq_connect(&c, argv[1], &err) < 0) {
        fprintf(stderr, "%s\n", err.message);
        return 3;
    }
    uint64_t *ids = calloc(n, sizeof *ids);
    int status = 3;
    if (ids && submit(c, argv[2], argv + 3, n, ids) == 0) {
        long not_done = wait_results(c, ids, n);
        status = not_done < 0 ? 3 : not_done > 0 ? 1 : 0;
    }
    free(ids);
    llmq_close(c);
    return status;
}
