// A TypeScript worker for tests/workers/test_mixed.py: the SDK in
// sdk/typescript (built to dist/ by sdk/typescript/test.sh), serving
// `ts_shout`, which journals a step, reaches a safe point and returns its
// text in capitals.
//
//   node tests/workers/ts_worker.mjs ws://127.0.0.1:PORT/workers TOKEN
import { Worker } from "../../sdk/typescript/dist/index.js";

const [url, token] = process.argv.slice(2);
const worker = new Worker({ url, token, name: "ts-mixed", capacity: 4 });
worker.tool(
  {
    name: "ts_shout",
    description: "Returns its text in capitals (a TypeScript worker).",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  },
  async (ctx, args) => {
    const shouted = await ctx.step("shout", () => args.text.toUpperCase());
    const steers = await ctx.checkpoint();
    return `${shouted}${steers.length ? ` (${steers.join(", ")})` : ""}`;
  },
);
worker.ready().then(() => console.log("ready"));
await worker.run();
