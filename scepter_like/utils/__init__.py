"""Small helpers: distributed environment, logging, checkpoint I/O, seeding, imports."""
