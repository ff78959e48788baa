"""The reference renderer for these fixtures: Python Jinja2 configured the way
transformers' _compile_jinja_template configures it (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, the loopcontrols extension, the `generation` tag,
its own `tojson`, `raise_exception` and `strftime_now` globals)."""
import json
from datetime import datetime
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

class AssistantTracker(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)
    def _generation_support(self, caller):
        return caller()

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(format):
    return datetime.now().strftime(format)

def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = strftime_now
    return e

ENV = env()

def render(source, context):
    """("ok", text); ("raised", message) when the template called raise_exception;
    ("compile_error" | "error", "Type: message") for any other failure."""
    try:
        t = ENV.from_string(source)
    except Exception as ex:
        return ("compile_error", f"{type(ex).__name__}: {ex}")
    try:
        return ("ok", t.render(**context))
    except jinja2.exceptions.TemplateError as ex:
        if type(ex) is jinja2.exceptions.TemplateError:
            return ("raised", str(ex))
        return ("error", f"{type(ex).__name__}: {ex}")
    except Exception as ex:
        return ("error", f"{type(ex).__name__}: {ex}")
