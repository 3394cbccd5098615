"""trainctl's own targets, one package each (`targets/<name>/`: section.py, handle.py, render.py, engine.py,
target.py), each a plug-in like any other (trainctl/targets/registry.py); base.py is what each provides, lookup.py
finds one by name. Nothing is imported here, so importing a target's section costs nothing else.
"""
