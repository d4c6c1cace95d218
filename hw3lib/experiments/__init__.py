"""The course's GRPO experiments as named grids (`grids`: one `GridSpec` each), trained by `runner`, run two at a
time (`parallel`), their seed band measured on the base recipe's replicas (`seeds`), compared against noise
(`compare`, every band from `hw3lib.core.stats`), read as findings (`trends`, `facts`, `selection`, `answers`),
worded in one place (`render`), reported (`report`), plotted (`plots`), shown in notebook 05 (`notebook`), and
`hw3 sweep` (`cli`); what notebook 02 samples per course and profile (`best_of_n_setup`).
"""
