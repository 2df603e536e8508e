"""What the commands compute, callable without a command line.

Each module here answers one command's question from parsed inputs: it checks them (one-line
:class:`moeplan.errors.MoeplanError` for a bad one), orchestrates the planners, the searches
and the serving simulator, and assembles the result the command prints — a dataclass or the
``--json`` object. It prints nothing, writes no file and never exits: :mod:`moeplan.cli`
parses the flags, calls it, prints the answer and writes the files. Tests call these
functions directly, without a subprocess or a command line.
"""
