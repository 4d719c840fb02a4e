"""The model audit: where a compiler's fusion leaves time on the table in a whole model.

`fusebench audit MODEL` builds a model (models.py, zoo.py), runs its step eagerly and compiled
(step.py), profiles every kernel (profile.py), matches them to what Inductor generated
(fusebench.fusion), ranks the memory-bound regions between compute kernels by the time fusion could
still save (analysis.py), and keeps the result in the store like any run.
"""
