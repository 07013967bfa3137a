raise RuntimeError("failing_at_import refuses to be imported")
