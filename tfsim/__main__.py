from tfsim.cli import entry

raise SystemExit(entry())
