// The bridge between Polpo and a tool written with defineTool(...): reads one JSON request on
// stdin, runs the tool's execute(ctx, params) and writes one JSON answer on stdout.
// Node's stdio and Buffer are imported by their `node:` names, which Deno and Bun provide too.
import process from "node:process";
import { Buffer } from "node:buffer";
import tool from "./__ENTRY__";

const freeze = (value) => {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Object.keys(value)) freeze(value[key]);
  }
  return value;
};

const answer = (body) => process.stdout.write(JSON.stringify(body));

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const slots = request.connections || {};
const connections = {
  require(slot) {
    const found = slots[slot];
    if (!found) throw new Error(`connection slot \`${slot}\` is not declared by this tool`);
    return freeze({ getHeaders: () => ({ ...found.headers }) });
  },
  get(slot) {
    return this.require(slot);
  },
};
const ctx = freeze({
  invocation: freeze(structuredClone(request.invocation ?? {})),
  bindings: freeze(structuredClone(request.bindings ?? {})),
  connections,
});
try {
  if (!tool || typeof tool.execute !== "function") throw new Error("the entrypoint's default export is not defineTool({... execute })");
  if (tool.name !== request.name) throw new Error(`defineTool names \`${tool.name}\`, the manifest \`${request.name}\``);
  const result = await tool.execute(ctx, freeze(request.params ?? {}));
  answer({ ok: true, result: typeof result === "string" ? result : JSON.stringify(result ?? null) });
} catch (error) {
  const cause = error && error.cause ? `: ${error.cause.message || error.cause}` : "";
  answer({ ok: false, error: `${String((error && error.message) || error)}${cause}` });
}
