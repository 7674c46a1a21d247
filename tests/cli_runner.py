"""Run the ``tfsim`` command line in-process, as the tests of its subcommands do."""

from tfsim.cli import main


def run(argv, capsys):
    """``tfsim ARGV...``: (exit status, stdout, stderr), argparse's own usage errors included."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
