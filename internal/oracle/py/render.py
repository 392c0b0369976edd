"""render.py: the Python half of forkline's test oracle (internal/oracle).

Renders chat templates with Debian's Jinja2 set up the way Hugging Face
transformers sets it up for ``apply_chat_template`` (read from
src/transformers/utils/chat_template_utils.py: ``_compile_jinja_template`` and
``render_jinja_template``): an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and a
``{% generation %}`` tag, a ``tojson`` filter that is ``json.dumps`` with
``ensure_ascii=False`` (HTML characters unescaped, indent/separators/sort_keys
passed through), and the globals ``raise_exception`` and ``strftime_now``.
This is the renderer trainers and vLLM use, so it is the reference.

A long-lived process speaking JSON lines on stdin/stdout: one request per line
({"id": N, "op": "...", ...}), one answer per line ({"id": N, "result": ...}
or {"id": N, "error": "..."}), in request order. It knows nothing of forkline;
the Go side sends the template source and the whole template context.
"""

import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(jinja2.ext.Extension):
    """The ``{% generation %}...{% endgeneration %}`` tag of transformers'
    templates: renders its body unchanged and records where it landed (what
    ``return_assistant_tokens_mask`` is built from)."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.blocks = None
        self.spans = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_mark", []), [], [], body).set_lineno(lineno)

    def _mark(self, caller):
        text = caller()
        if self.blocks is not None:
            start = len("".join(self.blocks))
            self.spans.append([start, start + len(text)])
        return text


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


_compiled = {}


def compile_template(source):
    tmpl = _compiled.get(source)
    if tmpl is None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        tmpl = env.from_string(source)
        _compiled[source] = tmpl
    return tmpl


def _tracker(tmpl):
    for ext in tmpl.environment.extensions.values():
        if isinstance(ext, GenerationTracker):
            return ext
    return None


def continue_final(rendered, messages):
    """Cut the render after the final message's text, so the model continues
    it (transformers' continue_final_message, reimplemented)."""
    final = messages[-1]["content"]
    if isinstance(final, (list, tuple)):
        texts = [block["text"] for block in final if isinstance(block, dict) and "text" in block]
        if not texts:
            raise ValueError("continue_final_message is set but the final message has no text to continue")
        final = texts[-1]
    if final.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear in the render")
    at = rendered.rindex(final.strip())
    if rendered[at : at + len(final.lstrip())] == final:
        return rendered[: at + len(final.lstrip())]
    return rendered[: at + len(final.strip())]


def render(req):
    context = req["context"]
    tmpl = compile_template(req["source"])
    continue_final_message = bool(req.get("continue_final_message"))
    if continue_final_message and context.get("add_generation_prompt"):
        raise ValueError("continue_final_message and add_generation_prompt are not compatible")
    tracker = _tracker(tmpl)
    blocks, spans = [], []
    tracker.blocks, tracker.spans = blocks, spans
    try:
        for block in tmpl.generate(**context):
            blocks.append(block)
    finally:
        tracker.blocks, tracker.spans = None, None
    text = "".join(blocks)
    if continue_final_message:
        text = continue_final(text, context["messages"])
    return {"text": text, "generation_spans": spans}


def redump(req):
    """json.dumps(json.loads(text), ensure_ascii=False): how Python servers
    (vLLM's tool parsers, transformers' tojson) write JSON they parsed.
    Python's json module is the reference for number and string spelling."""
    return json.dumps(json.loads(req["json"]), ensure_ascii=False)


OPS = {
    "ping": lambda req: {"python": sys.version.split()[0], "jinja2": jinja2.__version__, "executable": sys.executable},
    "render": render,
    "redump": redump,
}


def main():
    # The Go side may start this with no locale: speak UTF-8 regardless.
    sys.stdin.reconfigure(encoding="utf-8")
    sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            answer = {"id": -1, "error": "bad request line: %s" % e}
        else:
            try:
                op = OPS.get(req.get("op"))
                if op is None:
                    raise ValueError("unknown op %r" % req.get("op"))
                answer = {"id": req["id"], "result": op(req)}
            except Exception as e:  # every failure goes back to the caller, never kills the helper
                answer = {"id": req.get("id", -1), "error": "%s: %s" % (type(e).__name__, e)}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
