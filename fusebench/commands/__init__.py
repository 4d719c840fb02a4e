"""The subcommands of `fusebench`, by what they work on; fusebench/cli.py registers them.

- common.py: consoles, the bad-input rule (one line on stderr, exit 2), shared option parsing
- measuring.py: list, run, show, ceilings, paired (measure on this machine)
- stores.py: results, overhead, report, compare, runs, merge, standing (read results stores)
"""
