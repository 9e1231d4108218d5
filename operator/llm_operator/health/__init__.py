"""What the user is told about a service's health: the status and its conditions
(:mod:`.status`), and why pods fail (:mod:`.podfailures`) or do not schedule
(:mod:`.podscheduling`), read from the pods and their Events."""
