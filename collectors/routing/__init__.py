"""The BMP collector: routing tables per router (Go program beside; service.py runs and asks it)."""
