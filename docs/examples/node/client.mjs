// Submit a batch to llmq and print each result as it completes
// (docs/CLIENTS.md walks through it).
//
//   npm install            # zeromq and @msgpack/msgpack, from package.json
//   node client.mjs tcp://127.0.0.1:5555 my-batch "Once upon a time" "The cat sat"
//
// Speaks the wire protocol of docs/PROTOCOL.md directly.
// stdout: one line per job, "INDEX<TAB>STATE<TAB>GENERATED_TOKENS<TAB>TEXT"
// (newlines in the text printed as spaces); stderr: the timings.
// Exit status: 0 every job done, 1 some job failed or did not finish, 2 bad
// usage, 3 the broker could not be reached or refused the batch.
import { Dealer } from "zeromq";
import { encode, decode } from "@msgpack/msgpack";

const WAIT_MS = 120000; // how long to wait for the whole batch

class BrokerError extends Error {}

// A DEALER socket to the broker's client endpoint.
class Connection {
  constructor(endpoint) {
    this.endpoint = endpoint;
    this.sock = new Dealer({ linger: 0 });
    this.sock.connect(endpoint);
  }

  close() {
    this.sock.close();
  }

  // Every body is one msgpack map with the protocol version, the type and a
  // request number of our choosing that the replies echo.
  async send(req, type, fields) {
    await this.sock.send(encode({ v: 1, type, req, ...fields }));
  }

  // The next message for request `req`; an "error" throws.
  async recv(req, timeoutMs) {
    this.sock.receiveTimeout = timeoutMs;
    for (;;) {
      let frames;
      try {
        frames = await this.sock.receive();
      } catch (e) {
        if (e.code === "EAGAIN")
          throw new BrokerError(`no reply from ${this.endpoint} within ${timeoutMs} ms`);
        throw e;
      }
      const msg = decode(frames[frames.length - 1]); // the body is the last frame
      if (msg.req !== req) continue; // a late reply to an earlier request
      if (msg.type === "error") throw new BrokerError(`${msg.code}: ${msg.message}`);
      return msg;
    }
  }
}

// Submits the prompts as one batch; returns the job ids in prompt order.
async function submit(conn, batch, prompts) {
  // A key per job: resubmitting after a lost reply returns the same jobs.
  const jobs = prompts.map((prompt, i) => ({
    key: `${batch}:${i}`, prompt, max_tokens: 32, temperature: 0,
  }));
  await conn.send(1, "submit", { batch, jobs });
  return (await conn.recv(1, 30000)).ids; // durable in the broker's database now
}

// Prints results as the broker pushes them; returns the jobs not done.
async function waitResults(conn, ids) {
  const index = new Map(ids.map((id, i) => [id, i]));
  await conn.send(2, "wait", { ids, timeout_ms: WAIT_MS });
  let notDone = 0;
  for (;;) {
    const msg = await conn.recv(2, WAIT_MS + 10000);
    if (msg.type === "wait_end") {
      if (msg.pending) console.error(`${msg.pending} jobs unfinished`);
      return notDone + msg.pending;
    }
    const done = msg.state === "done";
    const text = (done ? msg.text : msg.error ?? "").replaceAll("\n", " ");
    console.log(`${index.get(msg.id)}\t${msg.state}\t${msg.gen_tokens ?? 0}\t${text}`);
    if (done) {
      console.error(`job ${msg.id} on ${msg.worker}: ${msg.prompt_tokens} prompt + ` +
        `${msg.gen_tokens} generated tokens, queued ${msg.queue_wait_ms.toFixed(0)} ms, ` +
        `prefill ${msg.prefill_tok_s.toFixed(0)} tok/s, decode ${msg.decode_tok_s.toFixed(0)} tok/s`);
    } else {
      notDone++;
    }
  }
}

async function main(argv) {
  if (argv.length < 3) {
    console.error("usage: node client.mjs ENDPOINT BATCH PROMPT...");
    return 2;
  }
  const [endpoint, batch, ...prompts] = argv;
  const conn = new Connection(endpoint);
  try {
    const ids = await submit(conn, batch, prompts);
    return (await waitResults(conn, ids)) ? 1 : 0;
  } catch (e) {
    if (!(e instanceof BrokerError)) throw e;
    console.error(e.message);
    return 3;
  } finally {
    conn.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
