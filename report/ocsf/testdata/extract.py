#!/usr/bin/env python3
"""Extract the required attributes of the OCSF classes and objects sbx writes from a checkout of
github.com/ocsf/ocsf-schema at tag 1.3.0:  extract.py SCHEMA_DIR > ocsf-1.3.0-required.json

Resolves "extends" and "$include" (profiles are left out: sbx applies none) and keeps, per class
and per object, the attributes whose requirement is "required", the constraints (at_least_one,
just_one) and which attributes hold which of these objects."""
import json, os, sys

root = sys.argv[1]
CLASSES = {"1001": "system/filesystem", "1007": "system/process", "2004": "findings/detection_finding",
           "4001": "network/network_activity", "4003": "network/dns"}
OBJECTS = ["metadata", "product", "device", "process", "file", "actor", "network_endpoint",
           "network_connection_info", "dns_query", "finding_info"]

def load(rel):
    with open(os.path.join(root, rel)) as f:
        return json.load(f)

def attrs(doc):
    out = {}
    for inc in doc.get("attributes", {}).get("$include", []):
        if not inc.startswith("profiles/"):  # a profile's attributes count only where it is applied
            out.update(attrs(load(inc)))
    for k, v in doc.get("attributes", {}).items():
        if k != "$include":
            out.setdefault(k, {}).update(v)
    return out

def resolve(doc, kind):
    base = {}
    if doc.get("extends"):
        parent = doc["extends"]
        path = find(parent, kind)
        if path:
            base = resolve(load(path), kind)
    merged = {k: dict(v) for k, v in base.get("attributes", {}).items()}
    for k, v in attrs(doc).items():
        merged.setdefault(k, {}).update(v)
    cons = dict(base.get("constraints", {}))
    cons.update(doc.get("constraints", {}))
    return {"attributes": merged, "constraints": cons}

def find(name, kind):
    if kind == "objects":
        p = f"objects/{name}.json"
        return p if os.path.exists(os.path.join(root, p)) else None
    for dirpath, _, files in os.walk(os.path.join(root, "events")):
        if name + ".json" in files:
            return os.path.relpath(os.path.join(dirpath, name + ".json"), root)
    return None

DICT = load("dictionary.json")["attributes"]

def summary(r):
    req = sorted(k for k, v in r["attributes"].items() if v.get("requirement") == "required")
    objs = {}
    for k, v in r["attributes"].items():
        t = v.get("type") or DICT.get(k, {}).get("type")
        if t in OBJECTS:
            objs[k] = t
    return {"required": req, "constraints": r["constraints"], "objects": objs}

out = {"version": load("version.json")["version"], "classes": {}, "objects": {}}
for uid, path in CLASSES.items():
    out["classes"][uid] = dict(summary(resolve(load(f"events/{path}.json"), "events")), name=path)
for name in OBJECTS:
    out["objects"][name] = summary(resolve(load(f"objects/{name}.json"), "objects"))
json.dump(out, sys.stdout, indent=1, sort_keys=True)
print()
