/* llmq-worker: one model on one GPU (or the CPU), serving a broker.
 *
 * main.c holds the command line, the set-up (backend, model, vocabulary,
 * engine, identity, link) and the loop; the protocol is worker/session.c,
 * the wire and the heartbeat thread worker/link.c.
 *
 * The loop: wait for a message or a signal (not at all while the engine has
 * work), hand every message to the session, run the session's timers, then
 * one engine_step whose events the session turns into results.  A step may
 * be long; heartbeats do not wait for it (they leave from the link thread).
 * SIGTERM and SIGINT arrive through a signalfd in the poll set, so no
 * handler runs asynchronously.
 *
 * With --gpus the process serves nothing itself: it supervises one such
 * worker per GPU (worker/supervisor.c), each started with --gpu N. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/select.h"
#include "engine/engine.h"
#include "worker/identity.h"
#include "worker/link.h"
#include "model/chat.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "worker/session.h"
#include "worker/supervisor.h"

#define EXIT_FAILED 1
/* How long an idle worker sleeps between looks at its timers. */
#define IDLE_POLL_MS 100

static const char USAGE[] =
    "Usage: llmq-worker [--broker ENDPOINT] -m MODEL [OPTION]...\n"
    "Serve one model to an llmq-broker: take jobs, run them with continuous batching,\n"
    "send each result back with its timings.  One process per GPU.\n";

static const char EPILOG[] =
    "SIGTERM/SIGINT stop gracefully; a second one stops at once.  A lost broker is\n"
    "reconnected to; its jobs are requeued by the broker.\n"
    "Exit status: 0 after a clean stop, 1 when the model cannot be loaded or the\n"
    "engine or the link fails, 2 on bad usage.\n";

typedef struct options {
    const char *broker, *model, *id, *model_name, *broker_key, *curve_secret;
    const char *chat_template; /* --chat-template, NULL: the model's */
    const char *gpus; /* --gpus, NULL: not given */
    const char *aliases[WIRE_MAX_ALIASES]; /* --alias, repeatable */
    size_t n_aliases;
    bool cpu, verbose, no_prefix_cache, kv_f16;
    int32_t gpu; /* -1: not given */
    int32_t slots, threads, ctx, batch, kv_blocks, heartbeat_ms, grace_ms;
    int32_t min_step_ms;      /* LLMQ_TEST_MIN_STEP_MS: tests only, see serve() */
    int32_t test_engine_seqs; /* LLMQ_TEST_ENGINE_SEQS: tests only, see open_engine() */
} options;

/* ---- the command line ---------------------------------------------------------- */

/* --gpus makes a supervisor of GPU workers: it cannot be one itself. */
static int check_gpus(const options *o, llmq_err *err)
{
    if (o->cpu || o->gpu >= 0)
        return llmq_errf(err, "--gpus excludes --gpu and --cpu");
    if (!backend_gpus_built())
        return llmq_errf(err, "--gpus: built without CUDA, there are no GPU workers to run"
                              " (rebuild with ./configure --with-cuda, or use --cpu)");
    super_gpus g;
    return super_parse_gpus(o->gpus, &g, err);
}

/* The flags that go together, or exclude each other. */
static int check_options(void *opts, llmq_err *err)
{
    const options *o = opts;
    if (!o->broker_key != !o->curve_secret)
        return llmq_errf(err, "--broker-key and --curve-secret go together");
    if (o->cpu && o->gpu >= 0)
        return llmq_errf(err, "--cpu and --gpu exclude each other");
    if (o->gpus)
        return check_gpus(o, err);
    if (o->gpu >= 0 && !backend_gpus_built())
        return llmq_errf(err,
                         "--gpu %d: built without CUDA, there is no GPU engine"
                         " (rebuild with ./configure --with-cuda, or use --cpu)",
                         (int)o->gpu);
    return 0;
}

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse_args(int argc, char **argv, options *o)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (options){.broker = "tcp://127.0.0.1:5556",
                   .gpu = -1,
                   .slots = 0,
                   .threads = cores > 0 ? (int32_t)cores : 1,
                   .batch = 0,
                   .heartbeat_ms = WIRE_HEARTBEAT_MS,
                   .grace_ms = 10000};
    const cli_flag flags[] = {
        {"broker", 'b', "ENDPOINT", "the broker's worker endpoint (default tcp://127.0.0.1:5556)",
         CLI_TEXT(&o->broker)},
        {"model", 'm', "FILE", "GGUF model file (required)", CLI_TEXT(&o->model), .required = true},
        {"cpu", 0, NULL, "run the CPU engine (the default when built without CUDA)",
         CLI_SWITCH(&o->cpu)},
        {"gpu", 0, "N", "run on GPU N with the CUDA engine (default 0 when built with CUDA)",
         CLI_INT32(&o->gpu, 0, 1023)},
        {"gpus", 0, "all|N,...",
         "supervise one worker process per GPU (CUDA builds), each run with --gpu N, and"
         " --id ID-gpuN when --id ID is given; a crashed one is restarted after 1, 2, 4 ... 60 s",
         CLI_TEXT(&o->gpus)},
        {"slots", 's', "N", "jobs run at once, 1..4096 (default 256 on a GPU, 16 on the CPU)",
         CLI_INT32(&o->slots, 1, WIRE_MAX_SLOTS)},
        {"threads", 't', "N", "CPU engine threads (default: all cores)",
         CLI_INT32(&o->threads, 1, 1024)},
        {"ctx", 'c', "N", "context per job in tokens (default: the model's)",
         CLI_INT32(&o->ctx, 4, 1 << 24)},
        {"batch", 0, "N",
         "tokens per forward pass, at least --slots (default 512, or --slots if more)",
         CLI_INT32(&o->batch, 1, 1 << 16)},
        {"kv-blocks", 0, "N",
         "KV cache blocks of 16 tokens (default: a full context per slot, at most 90% of the"
         " memory left after the weights)",
         CLI_INT32(&o->kv_blocks, 1, INT32_MAX)},
        {"kv-f16", 0, NULL,
         "keep the KV cache in f16, 2 bytes a value (default q8_0: 34 bytes per 32 values, so"
         " 1.88 times the tokens in the same memory; f16 where a model's KV rows are no multiple"
         " of 32)",
         CLI_SWITCH(&o->kv_f16)},
        {"no-prefix-cache", 0, NULL,
         "compute every prompt in full, even the KV blocks it shares with an earlier job's"
         " (results are the same either way)",
         CLI_SWITCH(&o->no_prefix_cache)},
        {"id", 0, "NAME", "worker id, unique per broker (default HOST:gpuN, HOST:cpu-PID)",
         CLI_TEXT_BYTES(&o->id, 1, WIRE_MAX_NAME_BYTES)},
        {"model-name", 0, "NAME",
         "model name announced for routing (default: the file name without .gguf)",
         CLI_TEXT_BYTES(&o->model_name, 1, WIRE_MAX_NAME_BYTES)},
        {"alias", 0, "NAME",
         "another model name jobs may ask for to run here (e.g. the gpt-4o-mini of an OpenAI"
         " batch file), repeatable up to 16 times; results still name the model that ran",
         CLI_LIST(o->aliases, &o->n_aliases, WIRE_MAX_ALIASES, 1, WIRE_MAX_NAME_BYTES)},
        {"chat-template", 0, "NAME|FILE",
         "render chat jobs' messages with this template: a built-in one (chatml, llama2, llama3,"
         " llama3.1, mistral-v0.3, phi3, qwen2.5, qwen3) or a Jinja file (default: the model's"
         " tokenizer.chat_template)",
         CLI_TEXT(&o->chat_template)},
        {"broker-key", 0, "FILE", "the broker's CURVE public key (needs --curve-secret)",
         CLI_TEXT(&o->broker_key)},
        {"curve-secret", 0, "FILE", "this worker's CURVE secret key (from llmq-keygen)",
         CLI_TEXT(&o->curve_secret)},
        {"heartbeat-ms", 0, "N", "heartbeat period until the broker says its own (default 1000)",
         CLI_INT32(&o->heartbeat_ms, 10, 3600000)},
        {"grace-ms", 0, "N",
         "on SIGTERM, how long running jobs may finish before the rest is left to the broker"
         " to requeue (default 10000)",
         CLI_INT32(&o->grace_ms, 0, 86400000)},
        {"verbose", 'v', NULL, "a log line per job", CLI_SWITCH(&o->verbose)},
    };
    const cli_spec spec = {.program = "llmq-worker",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .check = check_options,
                           .check_ctx = o};
    return cli_read(&spec, argc, argv);
}

static int read_test_knob(const char *name, int64_t hi, int32_t *out)
{
    const char *text = getenv(name);
    int64_t v = 0;
    llmq_err err;
    if (text && cli_int(name, text, 0, hi, &v, &err) != 0) {
        fprintf(stderr, "llmq-worker: %s\n", err.msg);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* Knobs for tests only (llmq-worker(1)).  LLMQ_TEST_MIN_STEP_MS=N: no
 * engine step starts sooner than N ms after the previous one, so a test can
 * act on a job that provably cannot have finished, on a machine of any
 * speed.  LLMQ_TEST_ENGINE_SEQS=N: the engine runs N sequences at once (and
 * holds 2N) while the worker still announces --slots, so that a test can
 * see the engine refuse a job for lack of room. */
static int read_environment(options *o)
{
    return read_test_knob("LLMQ_TEST_MIN_STEP_MS", 60000, &o->min_step_ms) ||
           read_test_knob("LLMQ_TEST_ENGINE_SEQS", WIRE_MAX_SLOTS, &o->test_engine_seqs);
}

/* ---- set-up ------------------------------------------------------------------------- */

/* The parts of a running worker, each released by parts_free. */
typedef struct parts {
    backend *be;
    model *m;
    tok_vocab *vocab;
    chat_template *chat;             /* NULL: chat jobs fail with no_chat */
    char no_chat[LLMQ_ERR_MAX + 64]; /* why there is none */
    engine *eng;
    identity id;
    link_conn *link;
    session *sess;
    int32_t gpu_index;
} parts;

/* --gpu N, or by default the first GPU when there is one, else the CPU
 * engine (kernels/select.h: the same rule as llmq-run). */
static int open_backend(const options *o, parts *p, llmq_err *err)
{
    const backend_request req = {.cpu_only = o->cpu, .gpu = o->gpu, .threads = o->threads};
    char fallback[LLMQ_ERR_MAX];
    if (backend_select(&p->be, &req, &p->gpu_index, fallback, sizeof fallback, err) != 0)
        return -1;
    if (fallback[0])
        log_line("llmq-worker", o->id, "%s; running the CPU engine", fallback);
    return 0;
}

/* --slots, else what the engine is good at: a GPU's decode throughput keeps
 * rising to 256 sequences (docs/OPERATIONS.md: one H200 worker made 6,591
 * tok/s end to end at 64 slots, 8,013 at 256), a CPU's does not.  The KV
 * cache, not the slots, then bounds what runs: jobs are admitted while its
 * blocks last. */
#define GPU_DEFAULT_SLOTS 256
#define CPU_DEFAULT_SLOTS 16
static int32_t slots_of(const options *o, const parts *p)
{
    return o->slots > 0 ? o->slots : p->gpu_index >= 0 ? GPU_DEFAULT_SLOTS : CPU_DEFAULT_SLOTS;
}

static int open_engine(const options *o, parts *p, llmq_err *err)
{
    engine_config cfg = engine_default_config();
    const int32_t slots = o->test_engine_seqs > 0 ? o->test_engine_seqs : slots_of(o, p);
    /* Every running job's next token is a row of the pass. */
    if (o->batch > 0 && o->batch < slots)
        return llmq_errf(err,
                         "--batch %d is less than the %d slots: a forward pass needs a row"
                         " for each running job (raise --batch or lower --slots)",
                         o->batch, slots);
    cfg.max_seqs = slots;
    cfg.max_batch_tokens = o->batch > 0 ? o->batch : slots > 512 ? slots : 512;
    cfg.n_ctx = o->ctx;
    cfg.n_blocks = o->kv_blocks;
    cfg.prefix_cache = !o->no_prefix_cache;
    if (o->kv_f16)
        cfg.kv_type = BE_KV_F16;
    return engine_create(&p->eng, p->m, p->vocab, &cfg, err);
}

static int open_session(const options *o, parts *p, llmq_err *err)
{
    session_config sc = {.grace_ms = (uint32_t)o->grace_ms, .verbose = o->verbose};
    identity_hello(&p->id, &sc.hello);
    sc.hello.aliases = o->aliases;
    sc.hello.n_aliases = (uint32_t)o->n_aliases;
    sc.hello.engine = p->be->name;
    /* Never more than the engine can hold at once, unless a test asks. */
    int32_t free_slots = engine_free_slots(p->eng);
    const int32_t slots = slots_of(o, p);
    sc.hello.slots = (uint32_t)(slots < free_slots || o->test_engine_seqs ? slots : free_slots);
    sc.hello.n_ctx = (uint32_t)engine_get_config(p->eng)->n_ctx;
    const jobconv_model jm = {.vocab = p->vocab, .chat = p->chat, .no_chat = p->no_chat};
    return session_create(&p->sess, &sc, p->link, p->eng, &jm, err);
}

/* The template chat jobs are rendered with: --chat-template's, which must
 * open, else the model's own.  A model without one (or with one this build
 * cannot run) still serves prompt jobs; its chat jobs fail, saying why. */
static int open_chat(const options *o, parts *p, llmq_err *err)
{
    llmq_err why = {0};
    if (o->chat_template)
        return chat_template_open(&p->chat, o->chat_template, model_gguf(p->m), err);
    if (chat_template_open(&p->chat, NULL, model_gguf(p->m), &why) == 0)
        return 0;
    snprintf(p->no_chat, sizeof p->no_chat, "model '%s' cannot render messages: %s", p->id.model,
             why.msg);
    log_line("llmq-worker", p->id.worker, "%s; its chat jobs will fail", p->no_chat);
    return 0;
}

static int open_parts(const options *o, parts *p, llmq_err *err)
{
    identity_opts io = {.worker = o->id, .model_name = o->model_name};
    curve_keys keys;
    if (o->curve_secret &&
        curve_load_client(&keys, o->broker_key, o->curve_secret, err) != 0)
        return -1;
    if (open_backend(o, p, err) != 0)
        return -1;
    io.gpu_index = p->gpu_index;
    /* The name and UUID make the workers table's accounting per physical
     * GPU, whatever the index under CUDA_VISIBLE_DEVICES. */
    char gpu_name[WIRE_MAX_NAME_BYTES + 1], gpu_uuid[64];
    if (p->gpu_index >= 0 && backend_gpu_info(p->gpu_index, gpu_name, sizeof gpu_name, gpu_uuid,
                                              sizeof gpu_uuid, err) == 0) {
        io.gpu_name = gpu_name;
        io.gpu_uuid = gpu_uuid;
    }
    if (model_load(&p->m, o->model, p->be, err) != 0)
        return llmq_err_prefix(err, "cannot load the model");
    if (tok_load(&p->vocab, model_gguf(p->m), err) != 0)
        return llmq_err_prefix(err, "cannot load the model's vocabulary");
    return open_engine(o, p, err) || identity_make(&p->id, &io, model_gguf(p->m), err) ||
           open_chat(o, p, err) ||
           link_open(&p->link, o->broker, (uint32_t)o->heartbeat_ms, o->curve_secret ? &keys : NULL,
                     err) ||
           open_session(o, p, err);
}

static void parts_free(parts *p)
{
    session_free(p->sess);
    link_close(p->link); /* lets the last results and the bye leave */
    identity_free(&p->id);
    chat_template_free(p->chat);
    engine_free(p->eng);
    tok_free(p->vocab);
    model_free(p->m);
    backend_destroy(p->be);
}

/* The start line says what the worker chose and why: the slots (given or
 * the default), and whether the KV cache holds a full context per slot or
 * bounds how many run (then jobs are admitted while blocks last). */
static void say_ready(const options *o, const parts *p)
{
    const model_config *c = model_get_config(p->m);
    const engine_config *ec = engine_get_config(p->eng);
    char where[64];
    if (p->gpu_index >= 0)
        snprintf(where, sizeof where, "GPU %d", p->gpu_index);
    else
        snprintf(where, sizeof where, "the CPU, %d threads", o->threads);
    const uint32_t slots = session_slots(p->sess);
    const int64_t kv_tokens = (int64_t)ec->n_blocks * ec->block_size;
    char kv[256];
    if (kv_tokens >= (int64_t)slots * ec->n_ctx)
        snprintf(kv, sizeof kv, "a full context per slot");
    else
        snprintf(kv, sizeof kv,
                 "%s; %lld per slot on average: jobs are admitted while its blocks last, and "
                 "the youngest is preempted and recomputed when they run out",
                 o->kv_blocks ? "--kv-blocks" : "all the memory allows",
                 (long long)(kv_tokens / (slots ? slots : 1)));
    log_line("llmq-worker", p->id.worker,
             "%s (%s, %d layers, %.1f MB %s, %s) on %s, %u slots of %d tokens%s,"
             " a KV cache of %lld tokens in %s (%s)%s, chat template %s; broker %s",
             o->model, c->name, c->n_layers, c->weight_bytes / 1e6, quant_type_name(c->weight_type),
             p->id.model_hash, where, slots, ec->n_ctx,
             o->slots > 0        ? ""
             : p->gpu_index >= 0 ? " (the GPU default)"
                                 : " (the CPU default)",
             (long long)kv_tokens, be_kv_type_name(ec->kv_type), kv,
             ec->prefix_cache ? ", prefix cache on" : "",
             p->chat ? chat_template_name(p->chat) : "none", o->broker);
    char warning[256];
    if (engine_ctx_warning(p->eng, warning, sizeof warning))
        log_line("llmq-worker", p->id.worker, "warning: %s", warning);
}

/* ---- --gpus: one worker process per GPU ----------------------------------------- */

/* The program, 15 flags with a value and 3 switches take 34 at most; each
 * --alias 2 more. */
#define CHILD_MAX_ARGS (34 + 2 * WIRE_MAX_ALIASES)
#define CHILD_MAX_NUMBERS 12

/* One child's command line; the strings point into o, this and the exe path. */
typedef struct child_cmd {
    const char *argv[CHILD_MAX_ARGS];
    int argc, n_num;
    char num[CHILD_MAX_NUMBERS][24];
    char id[WIRE_MAX_NAME_BYTES + 16];
} child_cmd;

static void add_arg(child_cmd *c, const char *flag, const char *value)
{
    c->argv[c->argc++] = flag;
    if (value)
        c->argv[c->argc++] = value;
}

static void add_num(child_cmd *c, const char *flag, int32_t v)
{
    char *buf = c->num[c->n_num++];
    snprintf(buf, sizeof c->num[0], "%d", v);
    add_arg(c, flag, buf);
}

/* GPU gpu's worker: this program with the same settings and --gpu N; --id ID
 * becomes ID-gpuN (without --id the child's default, HOST:gpuN, is unique
 * already). */
static void child_command(const options *o, const char *exe, int gpu, child_cmd *c)
{
    c->argc = c->n_num = 0;
    add_arg(c, exe, NULL);
    add_arg(c, "--broker", o->broker);
    add_arg(c, "--model", o->model);
    add_num(c, "--gpu", gpu);
    if (o->slots > 0)
        add_num(c, "--slots", o->slots);
    add_num(c, "--threads", o->threads);
    if (o->batch > 0)
        add_num(c, "--batch", o->batch);
    add_num(c, "--heartbeat-ms", o->heartbeat_ms);
    add_num(c, "--grace-ms", o->grace_ms);
    if (o->ctx > 0)
        add_num(c, "--ctx", o->ctx);
    if (o->kv_blocks > 0)
        add_num(c, "--kv-blocks", o->kv_blocks);
    if (o->id) {
        snprintf(c->id, sizeof c->id, "%s-gpu%d", o->id, gpu);
        add_arg(c, "--id", c->id);
    }
    if (o->model_name)
        add_arg(c, "--model-name", o->model_name);
    for (size_t i = 0; i < o->n_aliases; i++)
        add_arg(c, "--alias", o->aliases[i]);
    if (o->chat_template)
        add_arg(c, "--chat-template", o->chat_template);
    if (o->broker_key) {
        add_arg(c, "--broker-key", o->broker_key);
        add_arg(c, "--curve-secret", o->curve_secret);
    }
    if (o->verbose)
        add_arg(c, "--verbose", NULL);
    if (o->no_prefix_cache)
        add_arg(c, "--no-prefix-cache", NULL);
    if (o->kv_f16)
        add_arg(c, "--kv-f16", NULL);
}

static int make_children(const options *o, const super_gpus *g, super_child *kids,
                         char (*labels)[16], llmq_err *err)
{
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return llmq_errf(err, "/proc/self/exe: %s", strerror(errno));
    exe[len] = '\0';
    for (int i = 0; i < g->n; i++) {
        child_cmd cmd;
        child_command(o, exe, g->index[i], &cmd);
        snprintf(labels[i], sizeof labels[i], "GPU %d", g->index[i]);
        if (super_child_init(&kids[i], labels[i], cmd.argv, cmd.argc, err) != 0)
            return -1;
    }
    return 0;
}

static int run_gpus(const options *o, int sigfd)
{
    llmq_err err;
    super_gpus g;
    int n_visible = backend_gpu_count(&err);
    if (n_visible < 0 || super_parse_gpus(o->gpus, &g, &err) != 0 ||
        super_resolve_gpus(&g, n_visible, &err) != 0) {
        log_line("llmq-worker", NULL, "%s", err.msg);
        return EXIT_FAILED;
    }
    super_child *kids = calloc((size_t)g.n, sizeof *kids);
    char (*labels)[16] = calloc((size_t)g.n, sizeof *labels);
    int rc = EXIT_FAILED;
    if (!kids || !labels)
        log_line("llmq-worker", NULL, "out of memory");
    else if (make_children(o, &g, kids, labels, &err) != 0)
        log_line("llmq-worker", NULL, "%s", err.msg);
    else {
        log_line("llmq-worker", NULL, "supervising %d GPU worker%s", g.n, g.n == 1 ? "" : "s");
        rc = super_run(kids, g.n, sigfd) == 0 ? 0 : EXIT_FAILED;
    }
    for (int i = 0; kids && i < g.n; i++)
        super_child_free(&kids[i]);
    free(kids);
    free(labels);
    return rc;
}

/* ---- the loop ------------------------------------------------------------------------ */

static int read_messages(parts *p, llmq_err *err)
{
    for (;;) {
        wire_msg m;
        llmq_err bad = {0};
        int got = link_recv(p->link, &m, &bad);
        if (got < 0)
            return llmq_errf(err, "%s", bad.msg);
        if (got == 0)
            return 0;
        if (m.type == WIRE_T_NONE)
            log_line("llmq-worker", p->id.worker, "%s", bad.msg);
        int rc = m.type == WIRE_T_NONE ? 0 : session_on_message(p->sess, &m, err);
        wire_msg_free(&m);
        if (rc != 0)
            return -1;
    }
}

/* An engine failure ends the worker: its jobs go back to the broker first. */
static int step(parts *p, llmq_err *err)
{
    const engine_event *ev;
    int32_t n;
    if (engine_step(p->eng, &ev, &n, err) != 0) {
        llmq_err lost;
        session_abort(p->sess, err->msg, &lost);
        return llmq_err_prefix(err, "engine");
    }
    return session_on_events(p->sess, ev, n, err);
}

/* How long the loop may wait for a message: not at all while the engine
 * has work, unless a minimum step period (tests only) says to wait. */
static long poll_timeout(const parts *p, int64_t next_step_at)
{
    if (!engine_has_work(p->eng))
        return IDLE_POLL_MS;
    const int64_t wait = next_step_at - clock_mono_ms();
    return wait > 0 ? (long)wait : 0;
}

static int serve(parts *p, int32_t min_step_ms, int sigfd, llmq_err *err)
{
    int64_t next_step_at = 0;
    while (!session_done(p->sess)) {
        zmq_pollitem_t items[2] = {{link_socket(p->link), 0, ZMQ_POLLIN, 0},
                                   {NULL, sigfd, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, poll_timeout(p, next_step_at)) < 0 && errno != EINTR)
            return llmq_errf(err, "zmq_poll: %s", zmq_strerror(errno));
        struct signalfd_siginfo si;
        if ((items[1].revents & ZMQ_POLLIN) && read(sigfd, &si, sizeof si) == sizeof si)
            session_stop(p->sess);
        if (read_messages(p, err) != 0 || session_tick(p->sess, err) != 0)
            return -1;
        if (session_done(p->sess) || !engine_has_work(p->eng) || clock_mono_ms() < next_step_at)
            continue;
        next_step_at = clock_mono_ms() + min_step_ms;
        if (step(p, err) != 0)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_RUN)
        return rc;
    if (read_environment(&o) != 0)
        return CLI_EXIT_USAGE;
    int sigfd = cli_stop_signals();
    if (sigfd < 0) {
        log_line("llmq-worker", NULL, "signalfd: %s", strerror(errno));
        return EXIT_FAILED;
    }
    if (o.gpus) {
        rc = run_gpus(&o, sigfd);
        close(sigfd);
        return rc;
    }
    parts p = {0};
    llmq_err err = {0};
    rc = open_parts(&o, &p, &err);
    if (rc == 0) {
        say_ready(&o, &p);
        rc = serve(&p, o.min_step_ms, sigfd, &err);
        if (rc == 0 && session_failed(p.sess))
            rc = llmq_errf(&err, "stopped: the broker refused a result of this worker");
    }
    if (rc != 0) /* the id, once it is known */
        log_line("llmq-worker", p.id.worker ? p.id.worker : o.id, "%s", err.msg);
    parts_free(&p);
    close(sigfd);
    return rc != 0 ? EXIT_FAILED : 0;
}
