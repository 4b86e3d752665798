"""The commands that lock a device, run configs, append their rows and commit them: sweep,
profile, ceilings, warm. Only this package writes measured rows, through writer.py.
"""
