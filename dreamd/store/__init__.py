"""Where memory lives: the `Store` interface (interface.py), one way to open a store from
a target (opening.py), the queries both engines run (one module per part of memory), and
each engine in a package of its own (sqlite/, postgres/)."""
