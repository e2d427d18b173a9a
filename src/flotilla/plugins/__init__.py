"""Built-in scheduling plugins. Each implements extension points of ``flotilla.framework``."""
