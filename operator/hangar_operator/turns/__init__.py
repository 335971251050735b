"""The Turn controller: starting, steering, interrupting and ending turns."""
