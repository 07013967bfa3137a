"""Portal's bytecode layer: what capture and restore need to know of a code
object's bytecode, for each CPython version Portal runs on.

  tables.py         the one door: the running version's tables (v311.py, v313.py)
  model.py          errors and records (Instr, ExceptionEntry, LoopSite, ...)
  decode.py         instructions, caches, jumps, the exception table, the CFG
  stack.py          static stack depths and what each slot holds
  slots.py          the names of the fast-local slots (no imports: start-up needs it)
  liveness.py       which fast locals can still be read from an offset
  resume_points.py  loop sites, caller call sites, with sites

A port to a new CPython version adds a table module and touches the modules
above only where the version's logic (not its numbers) differs.  Nothing is
imported here: `import _portal.bytecode.tables` stays cheap (instrument.py reads
its block limit at start-up).
"""
