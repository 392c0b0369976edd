"""Validate ATIF trajectory files: the JSON Schema written from Harbor's RFC
(trajectory-v1.4.schema.json, checked by the jsonschema library), and the
rules the RFC states in prose that a schema cannot: step_id is the ordinal
index from 1, timestamps are ISO 8601, an observation's source_call_id names a tool_call_id of the
trajectory, and completion_token_ids and logprobs align when both are given.

usage: python3 validate.py SCHEMA FILE...
Prints one JSON object: {"files": N, "errors": ["FILE: why", ...]}.
"""
import datetime
import json
import sys

import jsonschema


def rules(doc):
    errs = []
    ids = set()
    for i, step in enumerate(doc.get("steps", []), start=1):
        ts = step.get("timestamp")
        if ts is not None:
            try:
                datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
            except ValueError:
                errs.append("step %d: timestamp %r is not ISO 8601" % (i, ts))
        if step.get("step_id") != i:
            errs.append("step %d has step_id %r" % (i, step.get("step_id")))
        for call in step.get("tool_calls") or []:
            ids.add(call.get("tool_call_id"))
    for step in doc.get("steps", []):
        for r in (step.get("observation") or {}).get("results", []):
            ref = r.get("source_call_id")
            if ref is not None and ref not in ids:
                errs.append("step %r: source_call_id %r names no tool_call_id" % (step.get("step_id"), ref))
        m = step.get("metrics") or {}
        if "completion_token_ids" in m and "logprobs" in m and len(m["completion_token_ids"]) != len(m["logprobs"]):
            errs.append("step %r: %d completion_token_ids, %d logprobs" % (step.get("step_id"), len(m["completion_token_ids"]), len(m["logprobs"])))
    return errs


def main():
    with open(sys.argv[1]) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    out = {"files": 0, "errors": []}
    for path in sys.argv[2:]:
        out["files"] += 1
        with open(path) as f:
            doc = json.load(f)
        for e in v.iter_errors(doc):
            out["errors"].append("%s: %s: %s" % (path, "/".join(str(p) for p in e.absolute_path), e.message))
        for e in rules(doc):
            out["errors"].append("%s: %s" % (path, e))
    print(json.dumps(out))


main()
