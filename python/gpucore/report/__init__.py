"""What a person looks at: report.html's page and its sections drawn from an evaluation's predictions
(page.py, sections.py) and the figures (plots.py). What to evaluate is decided in evaluation/."""
