"""The web dashboard (``/ui``) and the HTML pictures of a simulation.

``mount_dashboard(app)`` adds the dashboard to an app from ``flotilla.server.create_app``;
``render_simulation_html(sim)`` draws a finished simulation as one self-contained page. Both
draw with the same small SVG chart module (``static/charts.js``). See docs/dashboard.md.
"""

from flotilla.web.app import mount_dashboard

__all__ = ["mount_dashboard"]
