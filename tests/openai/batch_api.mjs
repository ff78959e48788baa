// The official OpenAI Node SDK (the `openai` package, pinned in
// package-lock.json) against nightshift's Batch API, as a user's batch script
// would drive it: only baseURL differs from a script written for OpenAI.
//
//   node tests/openai/batch_api.mjs SCENARIO
//
// Environment: NIGHTSHIFT_BASE_URL (http://HOST:PORT/v1), NIGHTSHIFT_TOKEN
// (the client token), NIGHTSHIFT_WORKER_TOKEN, NIGHTSHIFT_MODEL (a model a
// worker serves), NIGHTSHIFT_WORK_DIR (scratch files). Exits 0 when the
// scenario holds; otherwise prints what did not and exits 1.
// tests/openai/openai_sdk_test.cc starts the scheduler and the worker and
// runs each scenario.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const baseURL = process.env.NIGHTSHIFT_BASE_URL;
const token = process.env.NIGHTSHIFT_TOKEN ?? 'none';
const model = process.env.NIGHTSHIFT_MODEL;
const workDir = process.env.NIGHTSHIFT_WORK_DIR ?? '/tmp';
const client = new OpenAI({ apiKey: token, baseURL });

function completion(customId, body) {
  return { custom_id: customId, method: 'POST', url: '/v1/completions', body: { model, ...body } };
}

function chat(customId, content, maxTokens) {
  return {
    custom_id: customId,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content }], max_tokens: maxTokens },
  };
}

// Writes the lines (objects, or raw strings for malformed ones) and uploads them.
async function upload(name, lines) {
  const file = path.join(workDir, name);
  fs.writeFileSync(file, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n');
  const uploaded = await client.files.create({ file: fs.createReadStream(file), purpose: 'batch' });
  assert.match(uploaded.id, /^file-\d+$/);
  assert.equal(uploaded.object, 'file');
  assert.equal(uploaded.bytes, fs.statSync(file).size);
  assert.equal(uploaded.filename, name);
  assert.equal(uploaded.purpose, 'batch');
  assert.equal(typeof uploaded.created_at, 'number');
  return uploaded;
}

async function poll(id, done, seconds = 90) {
  const deadline = Date.now() + seconds * 1000;
  const seen = [];
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (seen.at(-1) !== batch.status) seen.push(batch.status);
    if (done(batch)) return { batch, seen };
    if (Date.now() > deadline) {
      throw new Error(`batch ${id} still ${batch.status} after ${seconds} s (seen ${seen}): ${JSON.stringify(batch)}`);
    }
    await new Promise((r) => setTimeout(r, 150));
  }
}

async function lines(fileId) {
  const response = await client.files.content(fileId);
  const text = await response.text();
  const info = await client.files.retrieve(fileId);
  assert.equal(info.bytes, Buffer.byteLength(text), `the File object's bytes of ${fileId}`);
  return text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
}

const EVERY_BATCH_FIELD = [
  'id', 'object', 'endpoint', 'errors', 'input_file_id', 'completion_window', 'status',
  'output_file_id', 'error_file_id', 'created_at', 'in_progress_at', 'expires_at', 'finalizing_at',
  'completed_at', 'failed_at', 'expired_at', 'cancelling_at', 'cancelled_at', 'request_counts',
  'metadata',
];

function checkOutputLine(line, chatEndpoint) {
  assert.match(line.id, /^batch_req_/);
  assert.equal(line.error, null);
  assert.equal(line.response.status_code, 200);
  assert.equal(typeof line.response.request_id, 'string');
  const body = line.response.body;
  assert.equal(body.object, chatEndpoint ? 'chat.completion' : 'text_completion');
  assert.equal(body.model, model);
  assert.equal(body.choices.length, 1);
  const choice = body.choices[0];
  assert.equal(typeof (chatEndpoint ? choice.message.content : choice.text), 'string');
  assert.ok(['stop', 'length', 'label'].includes(choice.finish_reason), choice.finish_reason);
  assert.ok(body.usage.prompt_tokens > 0);
  assert.equal(body.usage.total_tokens, body.usage.prompt_tokens + body.usage.completion_tokens);
}

const scenarios = {
  // Upload, create, poll to completed, download: one output line per request.
  async complete() {
    const requests = [
      completion('story', { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }),
      completion('ids', { prompt: [1, 415, 2936], max_tokens: 3, logprobs: 2 }),
      completion('classify', { prompt: 'Is the sky blue? Answer:', labels: [' yes', ' no'] }),
      completion('sampled', { prompt: 'Hello', max_tokens: 2, temperature: 0.8, seed: 7 }),
    ];
    const input = await upload('complete.jsonl', requests);
    const created = await client.batches.create({
      input_file_id: input.id,
      endpoint: '/v1/completions',
      completion_window: '24h',
      metadata: { night: 'one' },
    });
    for (const field of EVERY_BATCH_FIELD) assert.ok(field in created, `Batch has ${field}`);
    assert.match(created.id, /^batch_\d+$/);
    assert.equal(created.object, 'batch');
    assert.equal(created.status, 'validating');
    assert.deepEqual(created.metadata, { night: 'one' });
    assert.equal(created.expires_at, created.created_at + 24 * 3600);

    const { batch, seen } = await poll(created.id, (b) => b.status === 'completed');
    assert.deepEqual(batch.request_counts, { total: 4, completed: 4, failed: 0 });
    assert.equal(batch.error_file_id, null);
    for (const t of ['in_progress_at', 'finalizing_at', 'completed_at']) {
      assert.equal(typeof batch[t], 'number', `${t} is set`);
    }
    assert.ok(seen.every((s) => ['validating', 'in_progress', 'finalizing', 'completed'].includes(s)), `${seen}`);
    const out = await lines(batch.output_file_id);
    assert.equal(out.length, requests.length, 'one line per request');
    assert.deepEqual(out.map((l) => l.custom_id).sort(), requests.map((r) => r.custom_id).sort());
    for (const line of out) checkOutputLine(line, false);
    const ids = out.find((l) => l.custom_id === 'ids');
    assert.equal(ids.response.body.choices[0].logprobs.tokens.length, 3);
    const classify = out.find((l) => l.custom_id === 'classify').response.body;
    assert.deepEqual(classify.labels.map((l) => l.label), [' yes', ' no']);
    const total = classify.labels.reduce((sum, l) => sum + l.prob, 0);
    assert.ok(Math.abs(total - 1) < 1e-6, `label probabilities sum to ${total}`);
    assert.ok([' yes', ' no'].includes(classify.choices[0].text));

    // The chat endpoint, in a batch of its own (a batch has one endpoint).
    const chatInput = await upload('chat.jsonl', [chat('hi', 'Say hi', 3), chat('bye', 'Say bye', 2)]);
    const chatBatch = await client.batches.create({
      input_file_id: chatInput.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    });
    const chatDone = (await poll(chatBatch.id, (b) => b.status === 'completed')).batch;
    const chatOut = await lines(chatDone.output_file_id);
    assert.deepEqual(chatOut.map((l) => l.custom_id).sort(), ['bye', 'hi']);
    for (const line of chatOut) checkOutputLine(line, true);
  },

  // A malformed file: the batch is created (validating), then failed with every bad line.
  async malformed() {
    const input = await upload('malformed.jsonl', [
      completion('good', { prompt: 'fine', max_tokens: 1 }),
      '{"custom_id": "broken", ',
      { ...completion('typo', { prompt: 'x', max_tokens: 1 }), body: { model: `${model}-typo`, prompt: 'x' } },
      { method: 'POST', url: '/v1/completions', body: { model, prompt: 'no id' } },
      chat('wrong-endpoint', 'hi', 1),
    ]);
    const created = await client.batches.create({
      input_file_id: input.id, endpoint: '/v1/completions', completion_window: '24h',
    });
    assert.equal(created.status, 'validating');
    const { batch } = await poll(created.id, (b) => b.status !== 'validating');
    assert.equal(batch.status, 'failed', JSON.stringify(batch));
    assert.equal(typeof batch.failed_at, 'number');
    assert.deepEqual(batch.request_counts, { total: 0, completed: 0, failed: 0 });
    const errors = batch.errors.data;
    assert.deepEqual(errors.map((e) => e.line), [2, 3, 4, 5], JSON.stringify(errors));
    for (const e of errors) {
      assert.equal(typeof e.code, 'string');
      assert.ok(e.message.length > 0);
    }
    assert.match(errors[1].message, new RegExp(`model '${model}-typo' is served by no worker`));
    assert.match(errors[2].message, /custom_id is missing/);
    assert.equal(batch.output_file_id, null);
  },

  // Cancel mid-run: finished results are kept, the rest end cancelled.
  async cancel() {
    const requests = [completion('quick', { prompt: 'Hi', max_tokens: 1 })];
    // Greedy: deterministic, so a long one cannot end early on a sampled EOS.
    for (let i = 0; i < 4; ++i) {
      requests.push(completion(`long-${i}`, { prompt: `Tell a long story ${i}`, max_tokens: 400, temperature: 0 }));
    }
    const input = await upload('cancel.jsonl', requests);
    const created = await client.batches.create({
      input_file_id: input.id, endpoint: '/v1/completions', completion_window: '24h',
    });
    await poll(created.id, (b) => b.request_counts.completed >= 1);
    await assert.rejects(client.files.del(input.id), (e) => e instanceof OpenAI.ConflictError && e.status === 409,
      'the input of a running batch cannot be deleted');
    const cancelling = await client.batches.cancel(created.id);
    assert.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
    assert.equal(typeof cancelling.cancelling_at, 'number');
    const { batch } = await poll(created.id, (b) => b.status === 'cancelled', 30);
    assert.equal(typeof batch.cancelled_at, 'number');
    assert.equal(batch.request_counts.total, 5);
    assert.equal(batch.request_counts.completed, 1);
    const out = await lines(batch.output_file_id);
    assert.deepEqual(out.map((l) => l.custom_id), ['quick']);
    checkOutputLine(out[0], false);
    const errors = await lines(batch.error_file_id);
    assert.deepEqual(errors.map((l) => l.custom_id), ['long-0', 'long-1', 'long-2', 'long-3']);
    for (const e of errors) assert.equal(e.error.code, 'job_cancelled');
    await client.files.del(input.id);  // finished now: its input may go
    await assert.rejects(client.files.retrieve(input.id), (e) => e instanceof OpenAI.NotFoundError);
  },

  // The completion window passes: unfinished requests end as batch_expired.
  async expire() {
    const input = await upload('expire.jsonl', [
      completion('quick', { prompt: 'Hi', max_tokens: 1 }),
      completion('slow-0', { prompt: 'A very long tale', max_tokens: 400, temperature: 0 }),
      completion('slow-1', { prompt: 'Another long tale', max_tokens: 400, temperature: 0 }),
    ]);
    const created = await client.batches.create({
      input_file_id: input.id, endpoint: '/v1/completions', completion_window: '5s',
    });
    assert.equal(created.expires_at, created.created_at + 5);
    const { batch } = await poll(created.id, (b) => ['expired', 'completed', 'failed'].includes(b.status), 60);
    assert.equal(batch.status, 'expired', JSON.stringify(batch));
    assert.equal(typeof batch.expired_at, 'number');
    assert.equal(batch.request_counts.completed, 1);
    assert.deepEqual((await lines(batch.output_file_id)).map((l) => l.custom_id), ['quick']);
    const errors = await lines(batch.error_file_id);
    assert.deepEqual(errors.map((l) => l.custom_id), ['slow-0', 'slow-1']);
    for (const e of errors) {
      assert.equal(e.error.code, 'batch_expired');
      assert.equal(e.response, null);
    }
  },

  // A wrong token is the SDK's AuthenticationError; a worker's token is refused too.
  async auth() {
    const wrong = new OpenAI({ apiKey: 'not-the-token', baseURL, maxRetries: 0 });
    await assert.rejects(wrong.files.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(wrong.batches.retrieve('batch_1'), OpenAI.AuthenticationError);
    const worker = new OpenAI({ apiKey: process.env.NIGHTSHIFT_WORKER_TOKEN, baseURL, maxRetries: 0 });
    await assert.rejects(worker.models.list(), (e) => e instanceof OpenAI.PermissionDeniedError && e.status === 403);
    await assert.rejects(client.batches.retrieve('batch_999999'), OpenAI.NotFoundError);
    await assert.rejects(
      client.batches.create({ input_file_id: 'file-999999', endpoint: '/v1/completions', completion_window: '24h' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input_file_id');
  },

  // Listing: newest first, a page at a time, the SDK's auto-pagination.
  async pagination() {
    const input = await upload('page.jsonl', [completion('one', { prompt: 'x', max_tokens: 1 })]);
    const mine = [];
    for (let i = 0; i < 3; ++i) {
      mine.push((await client.batches.create({ input_file_id: input.id, endpoint: '/v1/completions', completion_window: '1h' })).id);
    }
    const first = await client.batches.list({ limit: 2 });
    assert.equal(first.data.length, 2);
    assert.deepEqual(first.data.map((b) => b.id), [mine[2], mine[1]]);
    assert.ok(first.hasNextPage());
    const second = await first.getNextPage();
    assert.equal(second.data[0].id, mine[0]);
    const all = [];
    for await (const b of client.batches.list({ limit: 2 })) all.push(b.id);
    const numbers = all.map((id) => Number(id.slice('batch_'.length)));
    assert.deepEqual(numbers, [...numbers].sort((a, b) => b - a), 'newest first');
    assert.equal(new Set(all).size, all.length, 'no batch twice');
    assert.ok(mine.every((id) => all.includes(id)));
    const files = await client.files.list();
    assert.ok(files.data.some((f) => f.id === input.id));
  },

  // The models attached workers serve.
  async models() {
    const page = await client.models.list();
    const served = page.data.find((m) => m.id === model);
    assert.ok(served, JSON.stringify(page.data));
    assert.equal(served.object, 'model');
    assert.ok(served.workers >= 1);
    assert.ok(served.context_length > 0);
    assert.equal((await client.models.retrieve(model)).id, model);
  },

  // Over HTTPS (NODE_EXTRA_CA_CERTS trusts the test certificate): files go and come back.
  async tls() {
    const input = await upload('tls.jsonl', [completion('a', { prompt: 'x', max_tokens: 1 })]);
    const text = await (await client.files.content(input.id)).text();
    assert.equal(text, fs.readFileSync(path.join(workDir, 'tls.jsonl'), 'utf8'));
  },
};

const name = process.argv[2];
if (!scenarios[name]) {
  console.error(`usage: node batch_api.mjs (${Object.keys(scenarios).join('|')})`);
  process.exit(2);
}
try {
  await scenarios[name]();
  console.log(`ok ${name}`);
} catch (error) {
  console.error(`FAILED ${name}: ${error.stack ?? error}`);
  process.exit(1);
}
