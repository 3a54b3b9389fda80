"""ScienceWorld: five science sub-tasks on the Java simulator (the paper's science scenario)."""
