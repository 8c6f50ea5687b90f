#!/usr/bin/env python3
"""Writes DIR/tokenizer_config.json with a chat_template for the chat-template
import test: `string` (a plain string) or `list` (the named-templates form,
"default" among others), keeping the fields of the original SRC file."""
import json
import sys

src, dst, form, template_file = sys.argv[1:5]
with open(src) as f:
    cfg = json.load(f)
with open(template_file) as f:
    template = f.read()
if form == "string":
    cfg["chat_template"] = template
else:
    cfg["chat_template"] = [{"name": "tool_use", "template": "{{ raise_exception('no') }}"},
                            {"name": "default", "template": template}]
with open(dst, "w") as f:
    json.dump(cfg, f)
