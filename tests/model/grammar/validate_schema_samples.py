#!/usr/bin/env python3
"""Validates sampled JSON texts against their schemas with python3-jsonschema, an implementation
independent of vkllm's schema compiler (test_json_schema.cpp writes the file).

    validate_schema_samples.py SAMPLES.json

SAMPLES.json: [{"name", "schema", "samples": [JSON text, ...]}]. Prints one line per sample that
is not JSON or not valid, then a summary; exit status 1 when any is.
"""
import json
import sys

import jsonschema


def main(path):
    with open(path, encoding="utf-8") as f:
        groups = json.load(f)
    checked = bad = 0
    for g in groups:
        validator = jsonschema.Draft7Validator(g["schema"], format_checker=jsonschema.FormatChecker())
        for text in g["samples"]:
            checked += 1
            try:
                value = json.loads(text)
            except ValueError as e:
                bad += 1
                print(f"{g['name']}: not JSON ({e}): {text!r}")
                continue
            errors = list(validator.iter_errors(value))
            if errors:
                bad += 1
                print(f"{g['name']}: {errors[0].message}: {text!r}")
    print(f"{checked} samples from {len(groups)} grammars, {bad} invalid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
