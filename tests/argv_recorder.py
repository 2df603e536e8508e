"""Stand-in executables for launch-script tests: each call appends one record of its argv."""

from __future__ import annotations


def recorder(fields: str = '"$(basename "$0")" "$@"', sep: str = "\\0") -> str:
    """A ``/bin/sh`` script recording each call to ``$ARGV_LOG``: ``fields`` (shell words),
    each ended by ``sep`` (a ``printf`` escape), then ``<end>``. Launch scripts start servers
    in the background, so the record is written whole to a file of its own and appended in
    one write (``cat``'s one buffer, ``O_APPEND``): records written piecewise by two calls at
    once interleaved."""
    return (
        f'#!/bin/sh\n{{ printf "%s{sep}" {fields}; printf "<end>{sep}"; }} > "$ARGV_LOG.$$"\n'
        'cat "$ARGV_LOG.$$" >> "$ARGV_LOG"\nrm -f "$ARGV_LOG.$$"\n'
    )
