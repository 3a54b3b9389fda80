"""ALFWorld: household tasks of ALFWorld's six types, played on TextWorld's PDDL engine."""
