package main

func init() { register(opsCommand("status")) }
