"""One package per target (`targets/<name>/`: section.py, render.py, engine.py, target.py).

table.py is the one list of targets; lookup.py finds one by name; base.py is what each provides.
Nothing is imported here, so importing a target's section costs nothing else.
"""
