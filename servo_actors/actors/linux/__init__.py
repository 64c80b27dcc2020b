"""Linux process control: process trees, process groups and cgroups, kills, the lifeline that
takes a servo's processes with it, the watchdog, and what ``/proc`` says of a process."""
