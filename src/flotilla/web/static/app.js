// Flotilla's dashboard: a page over the REST API (/v1) with the caller's own token, so it
// shows what the API would show them and nothing more. Plain ES modules, no build step.
// Pages (hash routes): #/jobs, #/jobs/ID, #/arrays/ID, #/queues, #/clusters, #/scheduler.
"use strict";

import {main, say, loadMe, stale, nextRoute, whenSignedIn} from "./common.js";
import {jobsPage, jobPage, arrayPage} from "./jobs.js";
import {queuesPage, clustersPage, schedulerPage} from "./fleet.js";

// --- routing -----------------------------------------------------------------------------

async function route() {
  const id = nextRoute();
  const path = (location.hash || "#/jobs").slice(1).split("?")[0];
  for (const link of document.querySelectorAll("nav.top a")) {
    const current = path.startsWith(link.getAttribute("href").slice(1));
    if (current) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  try {
    await loadMe();
    if (stale(id)) return;
    const parts = path.split("/").filter(Boolean);
    if (parts[0] === "jobs" && parts[1]) await jobPage(decodeURIComponent(parts[1]));
    else if (parts[0] === "arrays" && parts[1]) await arrayPage(decodeURIComponent(parts[1]));
    else if (parts[0] === "queues") await queuesPage();
    else if (parts[0] === "clusters") await clustersPage();
    else if (parts[0] === "scheduler") await schedulerPage();
    else await jobsPage();
    if (!stale(id)) main.focus({preventScroll: true});
  } catch (error) {
    if (error.status !== 401) say(error.message, "error");
  }
}

whenSignedIn(route);
window.addEventListener("hashchange", route);
route();