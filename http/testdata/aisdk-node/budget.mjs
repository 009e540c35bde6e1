// Calls Conclave's Chat Completions door once with the Vercel AI SDK's OpenAI provider at its default
// retry settings (no maxRetries given), as an application would. Run by contract_node_budget_test.go,
// as openai-node/budget.mjs, and prints the same JSON object.
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, APICallError } from 'ai';

const openai = createOpenAI({ baseURL: process.env.CONCLAVE_BASE_URL, apiKey: process.env.CONCLAVE_API_KEY });

const began = performance.now();
let outcome;
try {
  const r = await generateText({ model: openai.chat(process.env.CONCLAVE_MODEL), maxOutputTokens: 16,
    prompt: 'Which aisle is nearer the loading dock? (A) north (B) south' });
  outcome = { answer: { id: r.response.id, content: r.text } };
} catch (err) {
  // Past its retries the SDK throws a RetryError holding the last call's error.
  const e = APICallError.isInstance(err) ? err : err.lastError;
  if (!APICallError.isInstance(e)) {
    throw err;
  }
  const body = JSON.parse(e.responseBody ?? '{}').error ?? {};
  outcome = {
    error: {
      class: err.constructor.name,
      status: e.statusCode,
      type: body.type,
      code: body.code,
      message: e.message,
      should_retry: e.responseHeaders?.['x-should-retry'] ?? null,
      retry_after: e.responseHeaders?.['retry-after'] ?? null,
    },
  };
}
const elapsedMs = performance.now() - began;
console.log(JSON.stringify({ elapsed_ms: elapsedMs, ...outcome }));
