// Runs an OpenAI Batch input file through nightshift's Batch API with the
// official `openai` npm package (4.x): upload, create the batch, poll it,
// download the output and error files. These are the calls of a script
// written for OpenAI; only the base URL differs.
//
//   node batch-api.mjs FILE.jsonl [ENDPOINT]
//
// ENDPOINT is /v1/completions (default) or /v1/chat/completions: a batch has
// one. Environment: NIGHTSHIFT_BASE_URL (default http://127.0.0.1:8080/v1),
// NIGHTSHIFT_TOKEN (the scheduler's client token; any string when it has
// none). Writes NAME.output.jsonl and, when some requests did not succeed,
// NAME.errors.jsonl in the current directory. Exits 1 unless the batch
// completed.
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const [file, endpoint = '/v1/completions'] = process.argv.slice(2);
if (!file) {
  console.error('usage: node batch-api.mjs FILE.jsonl [ENDPOINT]');
  process.exit(2);
}
const client = new OpenAI({
  baseURL: process.env.NIGHTSHIFT_BASE_URL ?? 'http://127.0.0.1:8080/v1',
  apiKey: process.env.NIGHTSHIFT_TOKEN ?? 'none',
});

const input = await client.files.create({ file: fs.createReadStream(file), purpose: 'batch' });
let batch = await client.batches.create({
  input_file_id: input.id, endpoint, completion_window: '24h',
});
console.log(`${batch.id}: ${batch.status}`);
while (!['completed', 'failed', 'expired', 'cancelled'].includes(batch.status)) {
  await new Promise((resolve) => setTimeout(resolve, 1000));
  batch = await client.batches.retrieve(batch.id);
  const { total, completed, failed } = batch.request_counts;
  console.log(`${batch.id}: ${batch.status}, ${completed + failed} of ${total} done`);
}

const name = path.basename(file, '.jsonl');
for (const [id, suffix] of [[batch.output_file_id, 'output'], [batch.error_file_id, 'errors']]) {
  if (!id) continue;
  const text = await (await client.files.content(id)).text();
  fs.writeFileSync(`${name}.${suffix}.jsonl`, text);
  console.log(`wrote ${name}.${suffix}.jsonl`);
}
if (batch.status !== 'completed') {
  console.error(`${batch.id} ended ${batch.status}: ${JSON.stringify(batch.errors)}`);
  process.exit(1);
}
