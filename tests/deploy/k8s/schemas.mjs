// Validators for what `cadre deploy k8s` writes, as an API server would check it on create:
// core kinds through the kubernetes-models package (Kubernetes' own OpenAPI types), Kubeflow's
// kinds through the openAPIV3Schema of their CRDs (crds/, see its README) compiled with Ajv.
// CRD schemas are structural: unknown fields are rejected (what kubectl's strict field
// validation does), int-or-string, list-map keys and the CEL rules that apply on create are
// checked; CEL transition rules (those naming oldSelf) only apply to updates and are skipped.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Ajv from "ajv";
import { parse, parseAllDocuments } from "yaml";

import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { PersistentVolumeClaim } from "kubernetes-models/v1/PersistentVolumeClaim";
import { Service } from "kubernetes-models/v1/Service";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { ObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";

const here = path.dirname(fileURLToPath(import.meta.url));

// Kubernetes reads manifests as YAML 1.1 (sigs.k8s.io/yaml): "yes", "on", 0755 are not strings there.
export function readManifests(file) {
  return parseAllDocuments(fs.readFileSync(file, "utf8"), { version: "1.1" })
    .map((d) => {
      if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
      return d.toJS();
    })
    .filter((d) => d !== null);
}

// The CEL rules of the CRDs that apply on create, in JavaScript. A rule not listed here that
// meets a written object fails the test: new Kubeflow rules are never ignored silently.
const celRules = {
  "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')": (s) => /^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(s.metadata.name),
  "size(self.metadata.name) <= 63": (s) => s.metadata.name.length <= 63,
  "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')": (s) => s === "" || /^[A-Za-z][A-Za-z0-9+.-]*:\/\/.+$/.test(s),
  "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']": (s) =>
    ["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"].includes(s),
  "has(self.lastUpdatedTime)": (s) => "lastUpdatedTime" in s,
  "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1": (s) =>
    ["torch", "mpi", "jax", "xgboost", "flux"].filter((k) => k in s).length <= 1,
  "self >= 1": (s) => s >= 1,
  "!self.exists(c, c == 'node')": (s) => !s.includes("node"),
  "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))":
    (s) => !(s.startupPolicy && s.startupPolicy.startupPolicyOrder === "InOrder" && (s.replicatedJobs || []).some((x) => "dependsOn" in x)),
  "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)": (s) =>
    s.templates.every((t) => !t.metadata || !t.metadata.namespace),
};

// CRD schema -> JSON schema Ajv checks the way the API server does.
function structural(s) {
  if (Array.isArray(s)) return s.map(structural);
  if (!s || typeof s !== "object") return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) out[k] = k === "enum" || k === "default" || k === "example" ? v : structural(v);
  if (out["x-kubernetes-int-or-string"]) {
    delete out.type;
    out.anyOf = [{ type: "integer" }, { type: "string" }];
  }
  if (out.nullable && out.type) out.type = [out.type, "null"];
  delete out.nullable;
  if (out.type === "object" && out.properties && out.additionalProperties === undefined &&
      !out["x-kubernetes-preserve-unknown-fields"])
    out.additionalProperties = false;
  return out;
}

function makeAjv() {
  const ajv = new Ajv({ allErrors: true, strict: false });
  ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat("int64", { type: "number", validate: (n) => Number.isInteger(n) });
  ajv.addFormat("date-time", { type: "string", validate: (s) => !Number.isNaN(Date.parse(s)) });
  for (const k of ["x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields",
                   "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource"])
    ajv.addKeyword({ keyword: k });
  ajv.addKeyword({
    keyword: "x-kubernetes-list-type",
    type: "array",
    validate: function listType(kind, data, parentSchema) {
      if (kind === "atomic") return true;
      const keys = kind === "map" ? parentSchema["x-kubernetes-list-map-keys"] : null;
      const seen = new Set();
      for (const item of data) {
        const key = JSON.stringify(keys ? keys.map((k) => item[k] ?? parentSchema.items?.properties?.[k]?.default) : item);
        if (seen.has(key)) {
          listType.errors = [{ keyword: "x-kubernetes-list-type", message: `duplicate ${kind} entry ${key}` }];
          return false;
        }
        seen.add(key);
      }
      return true;
    },
  });
  ajv.addKeyword({
    keyword: "x-kubernetes-validations",
    validate: function cel(rules, data) {
      for (const { rule, message } of rules) {
        if (rule.includes("oldSelf")) continue;  // transition rule: updates only
        const check = celRules[rule];
        if (!check) {
          cel.errors = [{ keyword: "x-kubernetes-validations", message: `CEL rule not evaluated by this test: ${rule}` }];
          return false;
        }
        if (!check(data)) {
          cel.errors = [{ keyword: "x-kubernetes-validations", message: message || rule }];
          return false;
        }
      }
      return true;
    },
  });
  return ajv;
}

const ajv = makeAjv();
const crdValidators = new Map();  // "group/version/Kind" -> validate

export function loadCrd(file) {
  const crd = parse(fs.readFileSync(path.join(here, "crds", file), "utf8"));
  for (const v of crd.spec.versions) {
    const key = `${crd.spec.group}/${v.name}/${crd.spec.names.kind}`;
    crdValidators.set(key, ajv.compile(structural(v.schema.openAPIV3Schema)));
  }
  return crd;
}

const coreModels = {
  "v1/ConfigMap": ConfigMap,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "v1/Service": Service,
  "apps/v1/StatefulSet": StatefulSet,
};

// Returns the problems found in one object (empty when valid).
export function validate(obj) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  const problems = [];
  try {
    new ObjectMeta(obj.metadata).validate();
  } catch (e) {
    problems.push(`metadata: ${e.message}`);
  }
  if (coreModels[key]) {
    try {
      new coreModels[key](obj).validate();
    } catch (e) {
      problems.push(e.message);
    }
    return problems;
  }
  const check = crdValidators.get(key);
  if (!check) return [`no schema for ${key}`];
  if (!check(obj)) for (const e of check.errors) problems.push(`${e.instancePath || "/"} ${e.message}`);
  return problems;
}

// The JSON schema of a pod template as Kubeflow's CRDs embed it (full Kubernetes PodTemplateSpec,
// structural), for checking templates of core kinds strictly as well.
export function podTemplateValidator(trainingRuntimeCrd) {
  const schema = trainingRuntimeCrd.spec.versions[0].schema.openAPIV3Schema;
  const rj = schema.properties.spec.properties.template.properties.spec.properties.replicatedJobs.items;
  return ajv.compile(structural(rj.properties.template.properties.spec.properties.template));
}
