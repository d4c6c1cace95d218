"""The course's GRPO experiments as named grids (`grids`), run two at a time (`parallel`), reported
(`report`), plotted (`plots`), shown in notebook 05 (`notebook`), and `hw3 sweep` (`cli`); what notebook 02
samples per course and profile (`best_of_n_setup`).
"""
