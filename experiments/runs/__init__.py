"""What a run is and how it is made: run/ (one run: identified, recorded, resumed, probed), packed/
(K runs trained at once in one process) and sweep/ (specs expanded into runs and launched, resumably).
Each imports only the floors below it: sweep -> packed -> run."""
