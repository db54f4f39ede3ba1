#!/usr/bin/env python3
"""Validates DGP records against the normative schema.

Usage: validate_records.py SCHEMA RECORDS.jsonl
Each line is {"def": "<$defs name>", "value": <record>}. Prints 'N passed, N failed'."""
import json, sys
from jsonschema import Draft202012Validator, FormatChecker

schema = json.load(open(sys.argv[1]))
validators = {}
passed = failed = 0
for n, line in enumerate(open(sys.argv[2], encoding="utf-8"), 1):
    if not line.strip():
        continue
    item = json.loads(line)
    d = item["def"]
    if d not in validators:
        s = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{d}"}
        validators[d] = Draft202012Validator(s, format_checker=FormatChecker())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validators[d].iter_errors(item["value"])]
    if errors:
        failed += 1
        print(f"FAIL line {n} ({d}): {errors[:3]}"[:600])
    else:
        passed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
