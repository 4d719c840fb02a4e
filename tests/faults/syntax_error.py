"""A plugin that does not parse."""
import fusebench

def broken(:
    pass
