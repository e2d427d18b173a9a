"""What-if from the live fleet: the runtime estimator, the export of a live service as a
scenario, its projection forward in virtual time, and a changed fleet compared with it
(docs/scenarios.md, *What-if from the live fleet*)."""
