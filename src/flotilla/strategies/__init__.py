"""Built-in assignment strategies: which cluster a job goes to."""
