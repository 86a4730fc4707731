// Starts `cadre serve` on a free port for a Node test and stops it afterwards (also when the
// test process dies): CADRE_BIN and CADRE_TINY_MODEL (the tiny_model fixture) come from ctest.
import { spawn } from "node:child_process";

const started = new Set();
process.on("exit", () => {
  for (const child of started) child.kill("SIGKILL");
});

export async function startServer(extraArgs = []) {
  const bin = process.env.CADRE_BIN, model = process.env.CADRE_TINY_MODEL && `${process.env.CADRE_TINY_MODEL}/run`;
  if (!bin || !model) throw new Error("CADRE_BIN and CADRE_TINY_MODEL must be set (ctest does)");
  const child = spawn(bin, ["serve", "--model", model, "--port", "0", ...extraArgs], { stdio: ["ignore", "pipe", "pipe"] });
  started.add(child);
  let output = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`cadre serve did not start in 120 s:\n${output}`)), 120000);
    const onData = (data) => {
      output += data.toString();
      const m = output.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`cadre serve exited with ${code}:\n${output}`));
    });
  });
  child.stdout.on("data", (d) => (output += d.toString()));
  child.stderr.on("data", (d) => (output += d.toString()));
  return {
    port,
    baseURL: `http://127.0.0.1:${port}/v1`,
    output: () => output,
    async stop() {
      if (child.exitCode !== null) return child.exitCode;
      const exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
      child.kill("SIGTERM");
      const code = await exited;
      started.delete(child);
      return code;
    },
  };
}

// Percentile of a list of numbers (nearest rank).
export function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
