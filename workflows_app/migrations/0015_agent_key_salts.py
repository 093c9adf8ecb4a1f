from django.db import migrations, models


def forget_the_attempts_key(apps, schema_editor):
    # The key attempts' secrets were made with before agents had keys of their own.
    apps.get_model("workflows_app", "SigningKey").objects.filter(name="attempts").delete()


class Migration(migrations.Migration):

    dependencies = [
        ("workflows_app", "0014_deferred_start_and_priority"),
    ]

    operations = [
        migrations.AlterField(
            model_name="signingkey",
            name="name",
            field=models.CharField(max_length=220, unique=True),
        ),
        migrations.RunPython(forget_the_attempts_key, migrations.RunPython.noop),
    ]
