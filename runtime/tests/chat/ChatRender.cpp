//===- ChatRender.cpp - Render a chat template (test driver) -----*- C++ -*-===//
//
// kiln-chat-render TEMPLATE CONTEXT.json
//
// Renders the chat template file TEMPLATE with the variables of the JSON
// object in CONTEXT.json (messages, add_generation_prompt, bos_token, ...)
// through kiln_rt_chat and writes the text to stdout, byte for byte, with no
// newline added. Errors: "kiln-chat-render: error: FILE:LINE:COL: ..." on
// stderr, exit status 1. test/Chat compares the output with python3-jinja2
// (test/reference/render_chat_template.py).
//
//===----------------------------------------------------------------------===//
#include "chat/ChatTemplate.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

static int fail(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "kiln-chat-render: error: %s\n", message.c_str());
  return 1;
}

static bool readFile(const char *path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return !in.bad();
}

int main(int argc, char **argv) {
  if (argc != 3)
    return fail("usage: kiln-chat-render TEMPLATE CONTEXT.json");
  std::string source, contextText, error;
  if (!readFile(argv[1], source))
    return fail(std::string(argv[1]) + ": cannot read");
  if (!readFile(argv[2], contextText))
    return fail(std::string(argv[2]) + ": cannot read");
  kiln::chat::Value context;
  if (!kiln::chat::Value::fromJson(contextText, context, error))
    return fail(std::string(argv[2]) + ": " + error);
  if (!context.isDict())
    return fail(std::string(argv[2]) + ": expected a JSON object");
  kiln::chat::Template tmpl;
  if (!tmpl.parse(source, argv[1], error))
    return fail(error);
  std::string out;
  if (!tmpl.render(context, out, error))
    return fail(error);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
