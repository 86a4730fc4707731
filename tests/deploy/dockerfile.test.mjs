// The Dockerfile installs exactly the Debian packages scripts/setup.sh installs, builds cadre
// and puts the tokenizer shim where cadre looks for it (<bin>/../lib). Docker does not run here:
// this checks the file, it does not build the image.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

const source = process.env.CADRE_SOURCE_DIR;
assert.ok(source, "CADRE_SOURCE_DIR must be set");
const words = (text) => text.split("\n").map((l) => l.replace(/#.*/, "")).join(" ").split(/[\s\\]+/).filter(Boolean);

function setupPackages() {
  const text = fs.readFileSync(path.join(source, "scripts/setup.sh"), "utf8");
  const m = text.match(/^packages=\(\n([\s\S]*?)^\)/m);
  assert.ok(m, "no packages=( ... ) list in scripts/setup.sh");
  return words(m[1]);
}

function dockerPackages() {
  const text = fs.readFileSync(path.join(source, "Dockerfile"), "utf8");
  const installs = [...text.matchAll(/apt-get install ((?:[^&]|&(?!&))*)&&/g)];
  assert.equal(installs.length, 1, "expected one apt-get install in the Dockerfile");
  return words(installs[0][1]).filter((w) => !w.startsWith("-"));
}

test("the Dockerfile installs setup.sh's packages, no more, no fewer", () => {
  const setup = setupPackages(), docker = dockerPackages();
  assert.ok(setup.length > 10 && setup.includes("libtorch-dev"), setup.join(" "));
  assert.deepEqual([...docker].sort(), [...setup].sort());
  assert.equal(new Set(docker).size, docker.length, "a package is listed twice");
});

test("the Dockerfile builds cadre, puts it on PATH and the shim in ../lib", () => {
  const text = fs.readFileSync(path.join(source, "Dockerfile"), "utf8");
  assert.match(text, /^FROM debian:bookworm\b/m);
  assert.match(text, /cmake --build \S+ --target cadre/);
  const bin = text.match(/install -D -m 755 \S+\/bin\/cadre (\S+)/)[1];
  const lib = text.match(/install -D -m 755 \S+\/lib\/libcadre_spm\.so (\S+)/)[1];
  assert.equal(path.dirname(lib), path.join(path.dirname(path.dirname(bin)), "lib"));
  assert.match(text, new RegExp(`ln -s ${bin} /usr/local/bin/cadre`));
  // The whole checkout is copied in (CMake reads cmake/, include/, src/), less builds and data.
  assert.match(text, /^COPY \. \/src$/m);
  const ignored = fs.readFileSync(path.join(source, ".dockerignore"), "utf8").split("\n");
  for (const p of ["build*", "third_party", "runs", "tests/deploy/k8s/node_modules"]) assert.ok(ignored.includes(p), p);
  // The manifests' default mount path is the image's working directory.
  assert.match(text, /^WORKDIR \/workspace$/m);
});
