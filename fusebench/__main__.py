"""`python -m fusebench ...`: the command line without the installed `fusebench` script (a checkout
on PYTHONPATH, as on a machine where nothing may be installed)."""
from fusebench.cli import main

main()
