"""Wordle: guess a hidden five-letter English word in six tries (one of AgentGym's text games)."""
