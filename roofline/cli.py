"""The `roofline` command. Parses, calls, prints. Each subcommand lives in
roofline/commands/<name>.py and is imported only when it runs, so `roofline --help` and a
header audit never import torch, transformers, vllm or plotly."""
from __future__ import annotations

import importlib
import sys

import click

from .errors import RooflineError
from .untrusted import printable, redact_secrets, redact_url

# name -> (module, short help). Help text is here so --help needs no import.
COMMANDS = {
    "audit": ("roofline.commands.audit", "Bytes per decoded token, BF16 residuals and the decode ceiling of a model."),
    "plan": ("roofline.commands.plan", "Simulate quantization formats and recommend format, backend and vLLM flags."),
    "compare": ("roofline.commands.compare", "Rank checkpoints of one model (or the hub's variants) by expected tok/s."),
    "capacity": ("roofline.commands.capacity", "How many concurrent requests fit in vLLM's KV cache, and the decode curve."),
    "preflight": ("roofline.commands.preflight", "What a written-down vLLM serve line or recipe will do, before it starts."),
    "capture": ("roofline.commands.capture", "Load a model in vLLM with the roofline hook and write the live inventory."),
    "kernels": ("roofline.commands.kernels", "Kernels per decode step per layer, and the CUDA-graph benefit."),
    "bench": ("roofline.commands.bench", "Measure single-stream decode tok/s of an OpenAI-compatible server."),
    "doctor": ("roofline.commands.doctor", "Why a running vLLM server decodes below its roof, and what each fix gains."),
    "validate": ("roofline.commands.validate", "Set a measured decode tok/s beside the prediction."),
    "calibrate": ("roofline.commands.calibrate", "Measure this host's memory bandwidth (on a GPU also its launch costs)."),
    "hardware": ("roofline.commands.hardware", "The hardware catalogue: devices, aliases, each figure's kind and source."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("roofline.commands"):
                return _unavailable(name, short_help)
            raise
        command = module.command
        command.short_help = short_help
        return command

    def resolve_command(self, ctx, args):
        # a mistyped command gets the nearest one (click suggests options, not commands)
        name = args[0] if args else None
        if name is not None and name not in COMMANDS and not name.startswith("-"):
            import difflib

            near = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {near[0]!r}?" if near else
                                                     f" Commands: {', '.join(COMMANDS)}."))
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        # list without importing every command module
        rows = [(name, help_text) for name, (_, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str, short_help: str) -> click.Command:
    @click.command(name=name, help=short_help, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def not_built(args):
        raise RooflineError(f"'roofline {name}' is not part of this build")
    return not_built


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="roofline")
def cli():
    """roofline: how many bytes each decoded token reads, the tok/s ceiling that sets on your
    hardware, and which format, backend and vLLM flags to run."""


def main(argv: list[str] | None = None) -> int:
    try:
        # a command that ends with click's Exit(code) (doctor's partial diagnosis: 3) returns it here
        code = cli.main(args=argv, prog_name="roofline", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    except RooflineError as exc:
        # one line whatever a server or file put into the message: escaped, credentials redacted
        click.echo(f"error: {printable(redact_secrets(redact_url(str(exc))), 2000)}", err=True)
        return getattr(exc, "exit_code", 1)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return 130
    except click.UsageError as exc:
        # one line, like every other error: which option, what is wrong, where help is
        command = exc.ctx.command_path if exc.ctx is not None else "roofline"
        args = sys.argv[1:] if argv is None else list(argv)
        if command == "roofline" and args and args[0] in COMMANDS:  # an option's value missing: its command's help
            command = f"roofline {args[0]}"
        if isinstance(exc, click.NoSuchOption):
            _suggest_option(exc)
        click.echo(f"error: {printable(redact_secrets(redact_url(exc.format_message())), 2000)} (see '{command} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return 0


def _suggest_option(exc: click.NoSuchOption) -> None:
    """An abbreviation (`--hw`, `--kv`) suggests the options it abbreviates, before click's
    spelling-distance guesses (which offer --help for --hw)."""
    if exc.ctx is None:
        return
    typed = exc.option_name.lstrip("-").replace("-", "")
    names = [name for param in exc.ctx.command.params for name in getattr(param, "opts", ())
             if name.startswith("--")]

    def abbreviates(name: str) -> bool:  # the letters in order: hw -> hardware, kvd -> kv-cache-dtype
        letters = iter(name.lstrip("-"))
        return bool(typed) and name.lstrip("-")[0] == typed[0] and all(ch in letters for ch in typed)
    near = [name for name in names if abbreviates(name)]
    if near:
        exc.possibilities = near[:3]
        exc.message = f"No such option: {exc.option_name}."


if __name__ == "__main__":
    sys.exit(main())
