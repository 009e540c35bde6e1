// LangChain's ChatOpenAI against Conclave's chat completions, one case per run (its name the first
// argument), printing what the application got as JSON. CONCLAVE_BASE_URL, CONCLAVE_API_KEY and
// CONCLAVE_MODEL say where and what.
import { ChatOpenAI } from "@langchain/openai";

const chat = (model) => new ChatOpenAI({ model, apiKey: process.env.CONCLAVE_API_KEY, maxRetries: 0,
  configuration: { baseURL: process.env.CONCLAVE_BASE_URL } });
const prompt = "Which gas makes up most of Earth's atmosphere?";

const cases = {
  async text() {
    const m = await chat(process.env.CONCLAVE_MODEL).invoke(prompt);
    return { text: m.content, usage: m.usage_metadata, id: m.id };
  },
  async panel() {
    const m = await chat("conclave/general").invoke(prompt);
    return { text: m.content, id: m.id };
  },
  async stream() {
    let text = "";
    for await (const chunk of await chat(process.env.CONCLAVE_MODEL).stream(prompt)) text += chunk.content;
    return { text };
  },
  async tools() {
    const model = chat(process.env.CONCLAVE_MODEL).bindTools([{ type: "function", function: { name: "get_weather", description: "The weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }]);
    const m = await model.invoke("What is the weather in Paris?");
    return { text: m.content, toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.name, input: c.args })) };
  },
};

try {
  console.log(JSON.stringify(await cases[process.argv[2]]()));
} catch (e) {
  console.log(JSON.stringify({ error: { class: e.constructor.name, status: e.status ?? 0, message: String(e.message) } }));
}
