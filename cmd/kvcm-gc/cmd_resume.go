package main

func init() { register(opsCommand("resume")) }
