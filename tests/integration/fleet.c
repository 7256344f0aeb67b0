#include "tests/integration/fleet.h"

#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/file.h"

static const char *need_env(const char *name)
{
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "%s is not set: run through `make check`\n", name);
        exit(77);
    }
    return v;
}

static void model_path(char *out, size_t cap)
{
    snprintf(out, cap, "%s/models/stories260K.gguf", need_env("LLMQ_TEST_DATA"));
}

/* ---- processes ---------------------------------------------------------------------- */

/* fork + exec with stdout/stderr redirected and the variables of env
 * ("NAME=VALUE", NULL-ended; env may be NULL) set in the child; the child
 * dies with the test. */
static pid_t spawn(const char *const *argv, const char *out, const char *err_log,
                   const char *const *env)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if ((out && !freopen(out, "w", stdout)) || !freopen(err_log, "a", stderr))
            _exit(98);
        for (; env && *env; env++)
            if (putenv((char *)*env) != 0)
                _exit(98);
        execv(argv[0], (char *const *)argv);
        _exit(97);
    }
    return pid;
}

void fleet_start(harness *h, fleet_worker *w, const char *name, const char *const *extra)
{
    fleet_start_env(h, w, name, extra, NULL);
}

void fleet_start_paced(harness *h, fleet_worker *w, const char *name, const char *const *extra,
                       int min_step_ms)
{
    char pace[64];
    snprintf(pace, sizeof pace, "LLMQ_TEST_MIN_STEP_MS=%d", min_step_ms);
    const char *const env[] = {pace, NULL};
    fleet_start_env(h, w, name, extra, env);
}

void fleet_start_env(harness *h, fleet_worker *w, const char *name, const char *const *extra,
                     const char *const *env)
{
    char exe[512], model[512];
    snprintf(exe, sizeof exe, "%s/worker/llmq-worker", need_env("LLMQ_BUILDDIR"));
    model_path(model, sizeof model);
    snprintf(w->log, sizeof w->log, "%s/%s.log", h->dir, name);
    const char *argv[40] = {exe, "--broker", h->workers, "-m", model, "--cpu",
                            "-t", "1", "--id", name};
    int n = 10;
    for (; extra && *extra && n < 39; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    w->pid = spawn(argv, NULL, w->log, env);
}

int fleet_reap(fleet_worker *w, int wait_ms)
{
    if (w->pid <= 0)
        return -1;
    const int status = h_reap(w->pid, wait_ms);
    w->pid = 0;
    return status;
}

int fleet_stop(fleet_worker *w, int wait_ms)
{
    if (w->pid > 0)
        kill(w->pid, SIGTERM);
    return fleet_reap(w, wait_ms);
}

void fleet_kill9(fleet_worker *w)
{
    if (w->pid <= 0)
        return;
    kill(w->pid, SIGKILL);
    fleet_reap(w, 0);
}

int fleet_log_has(const fleet_worker *w, const char *text)
{
    return h_file_has(w->log, text);
}

/* ---- prompts and references -------------------------------------------------------------- */

char **fleet_prompts(size_t n)
{
    char path[512], *story;
    size_t len;
    llmq_err err;
    snprintf(path, sizeof path, "%s/reference/story.txt", need_env("LLMQ_TEST_DATA"));
    if (file_read_all(path, &story, &len, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(99);
    }
    char *words[1024];
    size_t n_words = 0;
    for (char *t = strtok(story, " \n"); t && n_words < 1024; t = strtok(NULL, " \n"))
        words[n_words++] = t;
    char **v = calloc(n, sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        /* 1..8 words from a start that moves by 3: all distinct, all one line. */
        size_t start = (i * 3) % (n_words - 8), count = 1 + i % 8;
        char line[256] = "";
        for (size_t k = 0; k < count; k++)
            snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", k ? " " : "",
                     words[start + k]);
        v[i] = strdup(line);
    }
    free(story);
    return v;
}

void fleet_strings_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

llmq_job *fleet_jobs(char **prompts, size_t n, uint32_t max_tokens, bool ignore_eos)
{
    llmq_job *jobs = calloc(n, sizeof *jobs);
    for (size_t i = 0; jobs && i < n; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].prompt = prompts[i];
        jobs[i].max_tokens = max_tokens;
        jobs[i].ignore_eos = ignore_eos;
    }
    return jobs;
}

/* llmq-run --parallel prints each prompt as "--- prompt K (FINISH, N tokens)\n"
 * followed by the prompt, the continuation and a newline. */
static int parse_reference(char *out, char **prompts, size_t n, char **texts)
{
    size_t found = 0;
    for (char *p = strstr(out, "--- prompt "); p; ) {
        unsigned long k = strtoul(p + 11, NULL, 10);
        char *body = strchr(p, '\n');
        if (!body || k < 1 || k > n)
            return -1;
        body++;
        char *next = strstr(body, "\n--- prompt ");
        char *end = next ? next : body + strlen(body) - 1; /* the closing newline */
        size_t plen = strlen(prompts[k - 1]);
        if ((size_t)(end - body) < plen || strncmp(body, prompts[k - 1], plen) != 0)
            return -1;
        texts[k - 1] = strndup(body + plen, (size_t)(end - body) - plen);
        found++;
        p = next ? next + 1 : NULL;
    }
    return found == n ? 0 : -1;
}

int fleet_reference(harness *h, char **prompts, size_t n, int max_tokens, char **texts)
{
    char file[300], out[300], log[300], exe[512], model[512], ntok[16];
    model_path(model, sizeof model);
    snprintf(file, sizeof file, "%s/prompts.txt", h->dir);
    snprintf(out, sizeof out, "%s/reference.txt", h->dir);
    snprintf(log, sizeof log, "%s/llmq-run.log", h->dir);
    snprintf(exe, sizeof exe, "%s/tools/llmq-run", need_env("LLMQ_BUILDDIR"));
    snprintf(ntok, sizeof ntok, "%d", max_tokens);
    FILE *f = fopen(file, "w");
    for (size_t i = 0; f && i < n; i++)
        fprintf(f, "%s\n", prompts[i]);
    if (!f || fclose(f) != 0)
        return -1;
    const char *argv[] = {exe,  "-m", model, "--parallel", "16", "-f",
                          file, "-n", ntok,  "-t",         "1",  NULL};
    int status;
    pid_t pid = spawn(argv, out, log, NULL);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    char *text;
    size_t len;
    llmq_err err;
    if (file_read_all(out, &text, &len, &err) != 0)
        return -1;
    int rc = parse_reference(text, prompts, n, texts);
    free(text);
    return rc;
}

/* ---- clients ------------------------------------------------------------------------------ */

llmq_client *fleet_client(harness *h, int timeout_ms)
{
    llmq_client *c;
    llmq_error err;
    if (llmq_connect(&c, h->clients, &err) != 0) {
        fprintf(stderr, "connect %s: %s\n", h->clients, err.message);
        exit(99);
    }
    llmq_set_timeout(c, timeout_ms);
    return c;
}

static size_t index_of(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return n;
}

size_t fleet_wait(llmq_client *c, const uint64_t *ids, size_t n, int timeout_ms,
                  llmq_state *state, char **texts)
{
    llmq_select sel = {.ids = ids, .n_ids = n};
    llmq_wait *w;
    llmq_error err;
    if (llmq_wait_begin(c, &sel, timeout_ms, &w, &err) != 0) {
        fprintf(stderr, "wait: %s\n", err.message);
        return 0;
    }
    size_t final = 0;
    llmq_result r;
    int ev;
    while ((ev = llmq_wait_next(w, 1000, &r, &err)) != LLMQ_WAIT_END && ev >= 0) {
        size_t i = ev == LLMQ_WAIT_RESULT ? index_of(ids, n, r.id) : n;
        if (i == n)
            continue;
        final++;
        state[i] = r.state;
        if (texts && r.text)
            texts[i] = strdup(r.text);
    }
    if (ev < 0)
        fprintf(stderr, "wait: %s\n", err.message);
    llmq_wait_free(w);
    return final;
}

int fleet_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(NULL);
    int status = system(cmd);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int64_t fleet_sqlf(const harness *h, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return h_sql(h, sql);
}

bool fleet_sql_becomes(const harness *h, int timeout_ms, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end; h_sleep_ms(20))
        if (h_sql(h, sql) == 1)
            return true;
    return false;
}
