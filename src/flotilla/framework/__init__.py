"""The scheduling framework: extension points, profiles, strategies' interface, queues.

``interfaces`` holds every extension point's contract; ``registry`` loads plugins and
strategies by entry point; ``placement`` runs a profile's plugins to place one job.
"""
