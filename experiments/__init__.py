"""The experiment driver (`hrljax-train`), the readers of run directories (`hrljax-plot`,
`summarize`, ...), the dataset maker (`hrljax-make-dataset`) and the presets (`configs`), installed
with hrljax. `benchmarks/`, `diagnostics/`, `results/` and `notebooks/` stay in the repository."""
