// Calls Conclave's Chat Completions door once with LangChain's ChatOpenAI at its default retry
// settings (no maxRetries given), as an application would. Run by contract_node_budget_test.go, as
// openai-node/budget.mjs, and prints the same JSON object.
import { ChatOpenAI } from '@langchain/openai';

const chat = new ChatOpenAI({ model: process.env.CONCLAVE_MODEL, apiKey: process.env.CONCLAVE_API_KEY, maxTokens: 16,
  configuration: { baseURL: process.env.CONCLAVE_BASE_URL } });

const began = performance.now();
let outcome;
try {
  const m = await chat.invoke('Which aisle is nearer the loading dock? (A) north (B) south');
  outcome = { answer: { id: m.id, content: m.content } };
} catch (err) {
  if (err.status === undefined) {
    throw err;
  }
  outcome = {
    error: {
      class: err.constructor.name,
      status: err.status,
      type: err.type ?? err.error?.type,
      code: err.code ?? err.error?.code,
      message: err.message,
      should_retry: err.headers?.get?.('x-should-retry') ?? err.headers?.['x-should-retry'] ?? null,
      retry_after: err.headers?.get?.('retry-after') ?? err.headers?.['retry-after'] ?? null,
    },
  };
}
const elapsedMs = performance.now() - began;
console.log(JSON.stringify({ elapsed_ms: elapsedMs, ...outcome }));
