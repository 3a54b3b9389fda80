"""MAZE: find the goal of a hidden grid maze from local wall sensing (one of AgentGym's text games)."""
